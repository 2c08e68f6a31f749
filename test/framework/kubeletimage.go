package framework

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// imageBinary is where the apportion image keeps its binary
// (hack/apportion-image/ociimage.BinaryPath, without the leading /).
const imageBinary = "apportion"

// PullFrom has the Kubelet pull the images of r: a pod whose image lives in
// r runs the apportion binary of that image (linux/runtime.GOARCH) instead
// of the test's own, and its status reports the image's digest as a
// kubelet does. Images elsewhere still run the test's binary. nil stops
// pulling.
func (k *Kubelet) PullFrom(r *Registry) {
	k.mu.Lock()
	k.registry = r
	k.mu.Unlock()
}

// pulledImage is an image the Kubelet pulled: the binary extracted from it
// and the image ID a kubelet reports (repository@digest of what the
// reference resolved to, the index for a multi-arch image).
type pulledImage struct {
	bin, imageID string
}

// binaryFor returns the binary to run for image, and the imageID to report:
// the test's binary and the reference itself for images outside the
// registry given to PullFrom.
func (k *Kubelet) binaryFor(ctx context.Context, image string) (bin, imageID string, err error) {
	k.mu.Lock()
	r := k.registry
	k.mu.Unlock()
	if r == nil {
		return k.bin, image, nil
	}
	ref, err := name.ParseReference(image)
	if err != nil || ref.Context().RegistryStr() != r.Host {
		return k.bin, image, nil //nolint:nilerr // not an image of the registry: the test's binary, as before
	}
	// For an index, desc.Image resolves the entry of this platform.
	platform := remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	desc, err := remote.Get(ref, append(r.remoteOptions(ctx), platform)...)
	if err != nil {
		return "", "", fmt.Errorf("pulling %s: %w", image, err)
	}
	imageID = ref.Context().Name() + "@" + desc.Digest.String()
	k.mu.Lock()
	p, ok := k.pulled[imageID]
	k.mu.Unlock()
	if ok {
		return p.bin, p.imageID, nil
	}
	img, err := desc.Image()
	if err != nil {
		return "", "", fmt.Errorf("pulling %s: %w", image, err)
	}
	bin = filepath.Join(k.dir, "images", desc.Digest.Hex, imageBinary)
	if err := extractFile(img, imageBinary, bin); err != nil {
		return "", "", fmt.Errorf("pulling %s: %w", image, err)
	}
	k.mu.Lock()
	if k.pulled == nil {
		k.pulled = map[string]pulledImage{}
	}
	k.pulled[imageID] = pulledImage{bin: bin, imageID: imageID}
	k.mu.Unlock()
	k.logf("pulled %s: %s, binary %s", image, imageID, bin)
	return bin, imageID, nil
}

// extractFile writes the file name of img's flattened file system to out
// (mode 0755).
func extractFile(img v1.Image, name, out string) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("no /%s in the image", name)
		}
		if err != nil {
			return err
		}
		if path.Clean("/"+h.Name) != "/"+name || h.Typeflag != tar.TypeReg {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		tmp := out + ".tmp"
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil { //nolint:gosec // an image the test pushed itself
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, out)
	}
}
