package main

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
)

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Install on EKS from an OCI registry", "install-on-eks-from-an-oci-registry"},
		{"Alert: ApportionNoLeader", "alert-apportionnoleader"},
		{"Modes, opting out, and which workloads", "modes-opting-out-and-which-workloads"},
		{"Shadow mode: watch before apportion acts", "shadow-mode-watch-before-apportion-acts"},
		{"Karpenter's pod deletion-cost feature", "karpenters-pod-deletion-cost-feature"},
		{"Runtime-class profiles (peer pods)", "runtime-class-profiles-peer-pods"},
		{"GitOps: Argo CD and Flux", "gitops-argo-cd-and-flux"},
		{"Debugging: `apportion inspect`", "debugging-apportion-inspect"},
		{"The `settings.image_timeout` value", "the-settingsimage_timeout-value"},
		{"**Bold** and _emphasis_", "bold-and-emphasis"},
		{"A [link](https://example.com) in it", "a-link-in-it"},
		{"Two  spaces", "two--spaces"},
		{"v1.2 → v1.3", "v12--v13"},
		{"Déjà vu", "déjà-vu"},
		{"Trailing closers ##", "trailing-closers"},
	} {
		src := "# " + c.heading + "\n"
		got := anchors([]byte(src))
		if !got[c.want] || len(got) != 1 {
			t.Errorf("heading %q: anchors %v, want exactly %q", c.heading, keys(got), c.want)
		}
	}
}

func TestRepeatedHeadingsAreNumbered(t *testing.T) {
	src := "# Status\n## Status\n### Status\n## Status 1\n"
	got := keys(anchors([]byte(src)))
	// GitHub: status, status-1, status-2; then "Status 1" is taken, so -1 of it.
	want := []string{"status", "status-1", "status-1-1", "status-2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("anchors %v, want %v", got, want)
	}
}

func TestCodeIsNeitherHeadingNorLink(t *testing.T) {
	src := "# Real\n```sh\n# not a heading\n[x](missing.md)\n```\n`[y](missing.md)` and ~~~ text\n~~~\n## Not either\n~~~\n"
	if got := keys(anchors([]byte(src))); !reflect.DeepEqual(got, []string{"real"}) {
		t.Errorf("anchors %v, want [real]", got)
	}
	if got := links([]byte(src)); len(got) != 0 {
		t.Errorf("links %v, want none", got)
	}
}

func TestLinks(t *testing.T) {
	src := `See [a](docs/a.md#x), ![img](img.png "title"), [b](<b c.md>) and
[code](pkg/x.go) [ext](https://example.com/y.md#z) [[nested] text](c.md).
[ref]: docs/ref.md#top
<a href="d.md">d</a>
`
	var got []string
	for _, l := range links([]byte(src)) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"1:docs/a.md#x", "1:img.png", "1:b c.md", "2:pkg/x.go", "2:https://example.com/y.md#z", "2:c.md", "3:docs/ref.md#top", "4:d.md"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("links\n%v, want\n%v", got, want)
	}
}

func TestCheck(t *testing.T) {
	repo := map[string]string{
		"README.md": "# Title\n## Install\n" +
			"[ok](docs/guide.md#usage) [self](#install) [dir](examples/) [src](pkg/x.go#L3)\n" +
			"[ext](https://example.com/none.md#nothing) [mail](mailto:a@b.c)\n" +
			"[root](/docs/guide.md) [folder anchor](docs#index)\n",
		"docs/README.md":  "# Index\n[up](../README.md#title) [sibling](guide.md)\n",
		"docs/guide.md":   "# Guide\n## Usage\n",
		"examples/a.yaml": "",
		"pkg/x.go":        "",
	}
	if got := run(t, repo); len(got) != 0 {
		t.Errorf("a repository without broken links: %v", got)
	}

	for _, c := range []struct{ link, want string }{
		{"[gone](docs/missing.md)", "README.md:6: docs/missing.md: no such file in the repository"},
		{"[anchor](docs/guide.md#install)", "README.md:6: docs/guide.md#install: docs/guide.md has no heading with the anchor #install"},
		{"[self](#usage)", "README.md:6: #usage: README.md has no heading with the anchor #usage"},
		{"[case](#Install)", "README.md:6: #Install: README.md has no heading with the anchor #Install"},
		{"[out](../other/README.md)", "README.md:6: ../other/README.md: points outside the repository"},
		{"[untracked](bin/apportion)", "README.md:6: bin/apportion: no such file in the repository"},
		{"[ref]: docs/guide.md#nope", "README.md:6: docs/guide.md#nope: docs/guide.md has no heading with the anchor #nope"},
	} {
		broken := map[string]string{}
		for k, v := range repo {
			broken[k] = v
		}
		broken["README.md"] += c.link + "\n"
		got := run(t, broken)
		if !reflect.DeepEqual(got, []string{c.want}) {
			t.Errorf("%s: problems %q, want %q", c.link, got, c.want)
		}
	}
}

func run(t *testing.T, repo map[string]string) []string {
	t.Helper()
	var files []string
	for f := range repo {
		files = append(files, f)
	}
	got, err := check(files, func(name string) ([]byte, error) {
		s, ok := repo[name]
		if !ok {
			return nil, fmt.Errorf("read %s: not in the repository", name)
		}
		return []byte(s), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
