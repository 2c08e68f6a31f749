package releasekit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushSignsKeyless(t *testing.T) {
	dir, host, digest := signedRelease(t)
	var calls []string
	cosign := func(_ context.Context, args ...string) ([]byte, error) {
		calls = append(calls, strings.Join(args, " "))
		return nil, nil
	}
	s := &SignOptions{Keyless: true, Revision: "0123abcd", SourceDateEpoch: time.Unix(1700000000, 0), Cosign: cosign}
	p, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: chartHelm, Sign: s})
	if err != nil {
		t.Fatal(err)
	}
	// The same eight calls as with a key, without the key and with the
	// transparency log, which keyless verification checks.
	if len(calls) != 8 {
		t.Fatalf("%d cosign calls, want 8:\n%s", len(calls), strings.Join(calls, "\n"))
	}
	image := host + "/apportion@" + digest
	if want := "sign --yes --allow-http-registry --recursive " + image; calls[0] != want {
		t.Errorf("first cosign call %q, want %q", calls[0], want)
	}
	for _, c := range calls {
		if strings.Contains(c, "--key") || strings.Contains(c, "--tlog-upload") {
			t.Errorf("keyless cosign call with a key or without the transparency log: %s", c)
		}
	}
	if len(p.Signed) != 3 || p.Signed[0] != image {
		t.Errorf("signed %v", p.Signed)
	}
}

func TestPushRefusesKeyAndKeyless(t *testing.T) {
	dir, host, _ := signedRelease(t)
	ran := false
	cosign := func(context.Context, ...string) ([]byte, error) { ran = true; return nil, nil }
	s := &SignOptions{Key: "cosign.key", Keyless: true, Revision: "abc", Cosign: cosign}
	_, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: chartHelm, Sign: s})
	if err == nil || !strings.Contains(err.Error(), "KEYLESS") {
		t.Errorf("Push with a key and keyless: %v, want a refusal naming KEYLESS", err)
	}
	ref, _ := name.ParseReference(host + "/apportion:1.2.3")
	if _, err := remote.Get(ref); err == nil || ran {
		t.Error("the release was pushed or signed although the push was refused")
	}
	if !strings.Contains(ErrUnsigned.Error(), "KEYLESS=1") {
		t.Errorf("the refusal of an unsigned push does not name KEYLESS=1: %v", ErrUnsigned)
	}
}
