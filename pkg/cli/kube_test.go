package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// clusterCommands are the commands that talk to a cluster.
var clusterCommands = []string{"explain", "status", "release-gates"}

func subcommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	root := newRoot(strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
	for _, c := range root.Commands() {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no command %s", name)
	return nil
}

// TestClusterCommandsShareKubeFlags: every command that talks to a cluster
// has kubectl's cluster flags, spelled and typed alike.
func TestClusterCommandsShareKubeFlags(t *testing.T) {
	want := map[string]string{ // name: shorthand
		"kubeconfig": "", "context": "", "cluster": "", "user": "", "namespace": "n",
		"as": "", "as-group": "", "as-uid": "", "as-user-extra": "", "token": "", "server": "s",
		"certificate-authority": "", "client-certificate": "", "client-key": "", "insecure-skip-tls-verify": "",
		"tls-server-name": "", "request-timeout": "", "disable-compression": "",
	}
	var first map[string]string
	for _, name := range clusterCommands {
		fs := subcommand(t, name).Flags()
		got := map[string]string{}
		fs.VisitAll(func(f *pflag.Flag) {
			if _, ok := want[f.Name]; ok {
				got[f.Name] = f.Shorthand + " " + f.Value.Type() + " " + f.DefValue + " " + f.Usage
			}
		})
		for flag, short := range want {
			f := fs.Lookup(flag)
			if f == nil {
				t.Errorf("%s lacks --%s", name, flag)
			} else if f.Shorthand != short {
				t.Errorf("%s --%s: shorthand %q, want %q", name, flag, f.Shorthand, short)
			}
		}
		if first == nil {
			first = got
			continue
		}
		for flag, v := range first {
			if got[flag] != v {
				t.Errorf("%s --%s differs from %s's: %q, want %q", name, flag, clusterCommands[0], got[flag], v)
			}
		}
	}
	for _, name := range []string{"status", "release-gates"} {
		if f := subcommand(t, name).Flags().ShorthandLookup("A"); f == nil || f.Name != "all-namespaces" {
			t.Errorf("%s lacks -A, --all-namespaces", name)
		}
	}
}

// kubeconfig writes a kubeconfig of two contexts on server: "team" (the
// current one) with namespace team-a, "bare" with none.
func kubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	config := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `"}
users:
- name: u
  user: {token: secret}
contexts:
- name: team
  context: {cluster: c, user: u, namespace: team-a}
- name: bare
  context: {cluster: c, user: u}
current-context: team
`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKubeFlagsResolve: the namespace is -n, else the context's, else
// "default"; "" with -A; the other flags reach the connection.
func TestKubeFlagsResolve(t *testing.T) {
	config := kubeconfig(t, "https://127.0.0.1:1")
	t.Setenv("KUBECONFIG", config)
	for _, tc := range []struct {
		args      []string
		all       bool
		namespace string
	}{
		{nil, false, "team-a"},
		{[]string{"--context", "bare"}, false, "default"},
		{[]string{"-n", "web"}, false, "web"},
		{[]string{"--context", "bare", "--namespace", "web"}, false, "web"},
		{nil, true, ""},
	} {
		kf := newKubeFlags()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		kf.add(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, namespace, err := kf.connect(tc.all)
		if err != nil || namespace != tc.namespace || cfg.Host != "https://127.0.0.1:1" || cfg.BearerToken != "secret" {
			t.Errorf("%q all=%v: namespace %q, config %v, %v; want namespace %q", tc.args, tc.all, namespace, cfg, err, tc.namespace)
		}
	}
	kf := newKubeFlags()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	kf.add(fs)
	if err := fs.Parse([]string{"--kubeconfig", config, "--as", "alice", "--as-group", "ops", "--token", "other", "--server", "https://127.0.0.2:2", "--request-timeout", "5s"}); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := kf.connect(false)
	if err != nil || cfg.Impersonate.UserName != "alice" || !slices.Equal(cfg.Impersonate.Groups, []string{"ops"}) ||
		cfg.BearerToken != "other" || cfg.Host != "https://127.0.0.2:2" || cfg.Timeout.String() != "5s" || cfg.UserAgent != "apportion-cli" {
		t.Errorf("flags not in the connection: %+v, %v", cfg, err)
	}
}

// apiServer serves discovery and empty pod lists, recording the path and
// the impersonated user of every pod list.
type apiServer struct {
	mu    sync.Mutex
	lists []string
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api":
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
	case r.URL.Path == "/apis":
		_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
	case r.URL.Path == "/api/v1":
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","namespaced":true,"kind":"Pod","verbs":["list","patch"]}]}`))
	case strings.HasSuffix(r.URL.Path, "/pods"):
		a.mu.Lock()
		a.lists = append(a.lists, r.URL.Path+" as "+r.Header.Get("Impersonate-User"))
		a.mu.Unlock()
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`))
	default:
		http.NotFound(w, r)
	}
}

// TestReleaseGatesNamespace: release-gates acts on the namespace kubectl
// would (-n, else the context's, else "default"), on every one with -A,
// and takes kubectl's other flags.
func TestReleaseGatesNamespace(t *testing.T) {
	api := &apiServer{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	t.Setenv("KUBECONFIG", kubeconfig(t, srv.URL))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "/api/v1/namespaces/team-a/pods as "},
		{[]string{"--context", "bare"}, "/api/v1/namespaces/default/pods as "},
		{[]string{"-n", "web"}, "/api/v1/namespaces/web/pods as "},
		{[]string{"-A", "--as", "alice"}, "/api/v1/pods as alice"},
	} {
		api.mu.Lock()
		api.lists = nil
		api.mu.Unlock()
		code, out, errOut := run(t, "", append([]string{"release-gates", "--dry-run"}, tc.args...)...)
		api.mu.Lock()
		lists := api.lists
		api.mu.Unlock()
		if code != ExitOK || out != "would release 0 pod(s) (dry run)\n" || !slices.Equal(lists, []string{tc.want}) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q, lists %q; want %q", tc.args, code, out, errOut, lists, tc.want)
		}
	}
}
