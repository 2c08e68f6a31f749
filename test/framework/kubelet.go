package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
)

// ProcessLabel marks pods whose process the test runs itself (Kubelet): the
// cluster's kwok leaves their readiness and completion alone.
const ProcessLabel = cluster.ProcessPodLabel

// podIPPrefix is where Kubelet numbers pod IPs: outside the service range
// and kwok's pod range, added to the namespace's loopback one by one.
const podIPPrefix = "10.254.0."

// Kubelet stands in for the kubelet for pods labelled ProcessLabel that run
// the apportion image: kwok pretends to run every other pod, but these must
// really serve, so that the API server reaches apportion through the chart's
// Service as it would on a cluster. For each such pod bound to a node it
//
//   - gives the pod an IP of its own, added to the cluster namespace's
//     loopback, and binds the process's ports there (what ":port" means
//     inside a pod's network namespace);
//   - starts the binary (the test's own; with PullFrom, the one inside the
//     pod's image when the image lives in that registry) with the
//     container's command, args and environment
//     (the image's entrypoint is `apportion webhook`), each volume mount
//     mapped to a folder of its own, Secret volumes filled from the Secret,
//     and as its only credentials a kubeconfig holding a token requested for
//     the pod's ServiceAccount (TokenRequest, bound to the pod);
//   - writes the pod's status as the kubelet would: Running and Ready once
//     the readiness probe answers, then not Ready and Ready again as the
//     probe keeps failing and passing (its period, timeout and thresholds),
//     Succeeded or Failed when a pod of a Job exits;
//   - on deletion, waits the preStop sleep, sends SIGTERM and, after the
//     rest of the grace period, SIGKILL; once the process has exited it
//     removes the pod object, so the pod (and the token bound to it) lasts
//     as long as its process, as with a kubelet.
type Kubelet struct {
	c    *cluster.Cluster
	kube client.Client
	bin  string
	dir  string

	mu       sync.Mutex
	registry *Registry              // PullFrom
	pulled   map[string]pulledImage // by image ID
	procs    map[types.UID]*PodProcess
	nextIP   int
	stopped  bool
	wg       sync.WaitGroup
}

// PodProcess is the process of one pod.
type PodProcess struct {
	Namespace, Name string
	UID             types.UID
	IP              string
	Cmd             *exec.Cmd
	LogName         string
	// ImageID is what the pod's status reports: repository@sha256:digest
	// for an image pulled from the registry given to PullFrom, else the
	// pod's image reference (the test's own binary runs).
	ImageID string
	// Binary is the apportion binary the process runs (Cmd may start it
	// through nsenter).
	Binary string
	// Started is when the process was started; Exited closes when it ends.
	Started time.Time
	Exited  chan struct{}
	// stopAt is when the kubelet began stopping the process (UnixNano;
	// the preStop sleep, then SIGTERM); 0 before.
	stopAt atomic.Int64

	preStop, grace time.Duration
	ready          atomic.Bool // passed its readiness probe
	exitErr        error
}

// NewKubelet runs pods labelled ProcessLabel with bin; dir holds their
// kubeconfigs and volumes.
func NewKubelet(c *cluster.Cluster, bin, dir string) *Kubelet {
	return &Kubelet{c: c, kube: c.Client(), bin: bin, dir: dir, procs: map[types.UID]*PodProcess{}}
}

// Run syncs pods every 200ms until ctx ends, then stops every process.
func (k *Kubelet) Run(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			k.StopAll()
			return
		case <-t.C:
		}
	}
}

// StopAll sends SIGTERM to every process and waits for them (SIGKILL after
// 20 s).
func (k *Kubelet) StopAll() {
	k.mu.Lock()
	k.stopped = true
	procs := make([]*PodProcess, 0, len(k.procs))
	for _, p := range k.procs {
		procs = append(procs, p)
	}
	k.mu.Unlock()
	for _, p := range procs {
		p.terminate(20 * time.Second)
	}
	k.wg.Wait()
}

// Processes returns the processes of pods that still exist and whose
// process has not exited, by pod name.
func (k *Kubelet) Processes() map[string]*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]*PodProcess{}
	for _, p := range k.procs {
		select {
		case <-p.Exited:
		default:
			if p.stopAt.Load() == 0 {
				out[p.Name] = p
			}
		}
	}
	return out
}

// All returns every process started so far, running or not.
func (k *Kubelet) All() []*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*PodProcess, 0, len(k.procs))
	for _, p := range k.procs {
		out = append(out, p)
	}
	return out
}

func (k *Kubelet) sync(ctx context.Context) {
	var pods corev1.PodList
	if err := k.kube.List(ctx, &pods, client.HasLabels{ProcessLabel}); err != nil {
		return
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		if !k.syncPod(ctx, pod) {
			return
		}
	}
	k.killGone(seen)
}

// syncPod does what pod needs next: start its process, remove the pod
// object, stop the process, or mark the pod Ready again. It returns false
// once StopAll has begun, when sync must do nothing more.
func (k *Kubelet) syncPod(ctx context.Context, pod *corev1.Pod) bool {
	k.mu.Lock()
	p, known := k.procs[pod.UID]
	stopped := k.stopped
	stopping := known && p.stopAt.Load() != 0
	k.mu.Unlock()
	switch {
	case stopped:
		return false
	case !known && awaitingStart(pod):
		if err := k.start(ctx, pod); err != nil {
			k.logf("starting pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	case pod.DeletionTimestamp != nil && (!known || p.done()):
		// Nothing runs (any more): remove the pod object, as the
		// kubelet does once its containers are gone. Until then it
		// stays, and with it the token bound to it (kwok's pod-delete
		// stage, which would remove it at once, skips these pods).
		k.remove(ctx, pod)
	case known && pod.DeletionTimestamp != nil && !stopping:
		k.kill(p)
	case known && pod.DeletionTimestamp == nil && p.lostReady(pod):
		// The node lifecycle controller marks a node's pods not ready
		// when the node misses heartbeats (kwok's can, on a loaded
		// machine); the kubelet reports them ready again on its next
		// status sync, and so do we.
		k.logf("%s/%s: Ready again after something marked it not ready", pod.Namespace, pod.Name)
		k.markReady(pod, p)
	}
	return true
}

// awaitingStart reports whether pod is bound to a node, Pending and not
// being deleted: a pod whose process the kubelet should start.
func awaitingStart(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodPending
}

// lostReady reports whether the process passed its readiness probe and
// still runs while pod is no longer marked Ready.
func (p *PodProcess) lostReady(pod *corev1.Pod) bool {
	return p.ready.Load() && !p.done() && !podReady(pod)
}

// killGone stops the processes of pods not in seen: pods gone without us
// seeing their deletion timestamp (deleted with a grace period of 0), as
// the kubelet would.
func (k *Kubelet) killGone(seen map[types.UID]bool) {
	k.mu.Lock()
	var gone []*PodProcess
	for uid, p := range k.procs {
		if !seen[uid] && p.stopAt.Load() == 0 && !p.done() {
			gone = append(gone, p)
		}
	}
	k.mu.Unlock()
	for _, p := range gone {
		k.kill(p)
	}
}

// remove deletes the pod object for good (grace period 0, this UID only).
func (k *Kubelet) remove(ctx context.Context, pod *corev1.Pod) {
	err := k.kube.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	switch {
	case err == nil:
		k.logf("removed pod %s/%s", pod.Namespace, pod.Name)
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		k.logf("removing pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// kill runs the pod's preStop sleep, then SIGTERM, then SIGKILL at the end
// of its grace period, in the background.
func (k *Kubelet) kill(p *PodProcess) {
	p.stopAt.Store(time.Now().UnixNano())
	k.logf("stopping %s/%s: preStop sleep %s, grace period %s", p.Namespace, p.Name, p.preStop, p.grace)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		time.Sleep(p.preStop)
		p.terminate(p.grace - p.preStop)
	}()
}

// terminate sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *PodProcess) terminate(grace time.Duration) {
	select {
	case <-p.Exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if grace <= 0 {
		grace = time.Second
	}
	select {
	case <-p.Exited:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// PreStop is the pod's preStop sleep (0 without one).
func (p *PodProcess) PreStop() time.Duration { return p.preStop }

// Stopping reports whether the kubelet has begun stopping the process
// (its pod was deleted).
func (p *PodProcess) Stopping() bool { return p.stopAt.Load() != 0 }

func (p *PodProcess) done() bool {
	select {
	case <-p.Exited:
		return true
	default:
		return false
	}
}

// Signal sends sig to the pod's process (the test's own SIGTERM or SIGKILL).
func (p *PodProcess) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

func (k *Kubelet) logf(format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(k.c.LogDir(), "kubelet.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	fmt.Fprintf(f, "%s %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("want one container, got %d", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	bin, imageID, err := k.binaryFor(ctx, ctr.Image)
	if err != nil {
		return err
	}
	ip, err := k.allocateIP()
	if err != nil {
		return err
	}
	if err := k.c.AddLoopbackAddress(ip); err != nil {
		return fmt.Errorf("adding the pod IP %s: %w", ip, err)
	}
	podDir := filepath.Join(k.dir, pod.Namespace+"_"+pod.Name)
	if err := os.MkdirAll(podDir, 0o700); err != nil {
		return err
	}
	kubeconfig, err := k.kubeconfigFor(ctx, pod, podDir)
	if err != nil {
		return err
	}
	mounts, err := k.volumes(ctx, pod, ctr, podDir)
	if err != nil {
		return err
	}
	args, err := containerArgs(ctr, mounts)
	if err != nil {
		return err
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + podDir, "KUBECONFIG=" + kubeconfig}
	env, err = appendContainerEnv(env, pod, ctr, ip, mounts)
	if err != nil {
		return err
	}
	logName := "pod-" + pod.Name
	cmd := k.c.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = podDir
	p := newPodProcess(pod, ctr, ip, cmd, logName)
	p.ImageID, p.Binary = imageID, bin
	if err := startLogged(k.c, logName, cmd); err != nil {
		return err
	}
	p.Started = time.Now()
	k.mu.Lock()
	k.procs[pod.UID] = p
	k.mu.Unlock()
	k.logf("started %s/%s as pid %d on %s: %s", pod.Namespace, pod.Name, cmd.Process.Pid, ip, strings.Join(args, " "))
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		p.exitErr = cmd.Wait()
		close(p.Exited)
		k.logf("%s/%s (pid %d) exited: %v", pod.Namespace, pod.Name, cmd.Process.Pid, p.exitErr)
		k.exited(pod, p)
	}()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.waitReady(pod, ctr, p)
	}()
	return nil
}

// allocateIP numbers the next pod IP; there are 250 of them.
func (k *Kubelet) allocateIP() (string, error) {
	k.mu.Lock()
	k.nextIP++
	n := k.nextIP
	k.mu.Unlock()
	if n > 250 {
		return "", errors.New("out of pod IPs")
	}
	return podIPPrefix + strconv.Itoa(n), nil
}

// containerArgs is the process's command line after the binary. The
// image's entrypoint is ["/apportion", "webhook"]; a command replaces it,
// args replace what follows.
func containerArgs(ctr corev1.Container, mounts map[string]string) ([]string, error) {
	args := append([]string{"webhook"}, ctr.Args...)
	if len(ctr.Command) > 0 {
		if filepath.Base(ctr.Command[0]) != "apportion" {
			return nil, fmt.Errorf("command %q is not the apportion binary", ctr.Command[0])
		}
		args = append(append([]string(nil), ctr.Command[1:]...), ctr.Args...)
	}
	for i := range args {
		args[i] = remap(args[i], mounts)
	}
	return args, nil
}

// appendContainerEnv appends the container's environment to env, with
// volume paths remapped and WEBHOOK_HOST the pod's IP unless the container
// sets it.
func appendContainerEnv(env []string, pod *corev1.Pod, ctr corev1.Container, ip string, mounts map[string]string) ([]string, error) {
	vals := map[string]string{}
	for _, e := range ctr.Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil:
				v = fieldRef(pod, ip, e.ValueFrom.FieldRef.FieldPath)
			case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
				// In bytes (no divisor); without a limit the kubelet gives the
				// node's allocatable memory: here the variable is left unset.
				q, ok := ctr.Resources.Limits[corev1.ResourceMemory]
				if !ok {
					continue
				}
				v = strconv.FormatInt(q.Value(), 10)
			default:
				return nil, fmt.Errorf("env %s: only value, fieldRef and limits.memory are emulated", e.Name)
			}
		}
		v = remap(v, mounts)
		// ":port" inside a pod binds its own network namespace: here the
		// pod's IP stands for it.
		if strings.HasSuffix(e.Name, "_BIND_ADDRESS") && strings.HasPrefix(v, ":") {
			v = ip + v
		}
		vals[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	if _, ok := vals["WEBHOOK_HOST"]; !ok {
		env = append(env, "WEBHOOK_HOST="+ip)
	}
	return env, nil
}

// newPodProcess describes the process cmd of pod, not yet started, with the
// pod's grace period (30 s by default) and preStop sleep.
func newPodProcess(pod *corev1.Pod, ctr corev1.Container, ip string, cmd *exec.Cmd, logName string) *PodProcess {
	p := &PodProcess{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, IP: ip, Cmd: cmd, LogName: logName, Exited: make(chan struct{})}
	p.grace = 30 * time.Second
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		p.grace = time.Duration(*s) * time.Second
	}
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil && ctr.Lifecycle.PreStop.Sleep != nil {
		p.preStop = time.Duration(ctr.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	return p
}

// startLogged starts cmd with its output in the cluster's log folder, as
// StartProcess does, without handing it to the cluster's Stop (the kubelet
// stops its processes itself, with their grace periods).
func startLogged(c *cluster.Cluster, name string, cmd *exec.Cmd) error {
	f, err := os.OpenFile(filepath.Join(c.LogDir(), name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	_ = f.Close()
	return err
}

// ExitCode is the process's exit status once it has exited (-1 before, or
// when killed by a signal).
func (p *PodProcess) ExitCode() int {
	select {
	case <-p.Exited:
		return p.Cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

func fieldRef(pod *corev1.Pod, ip, path string) string {
	switch path {
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.name":
		return pod.Name
	case "metadata.uid":
		return string(pod.UID)
	case "spec.nodeName":
		return pod.Spec.NodeName
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName
	case "status.podIP":
		return ip
	}
	return ""
}

// remap rewrites a container path under a volume mount to the folder that
// stands for it.
func remap(v string, mounts map[string]string) string {
	for mountPath, dir := range mounts {
		if v == mountPath || strings.HasPrefix(v, strings.TrimSuffix(mountPath, "/")+"/") {
			return dir + strings.TrimPrefix(v, strings.TrimSuffix(mountPath, "/"))
		}
	}
	return v
}

// volumes gives each mount a folder: empty for emptyDir, the Secret's keys
// as files for a Secret volume (written once; the e2e does not rotate
// mounted Secrets).
func (k *Kubelet) volumes(ctx context.Context, pod *corev1.Pod, ctr corev1.Container, podDir string) (map[string]string, error) {
	byName := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		byName[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		v, ok := byName[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no such volume", m.Name)
		}
		dir := filepath.Join(podDir, "volumes", m.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		switch {
		case v.EmptyDir != nil:
		case v.Secret != nil:
			var s corev1.Secret
			if err := k.kube.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.Secret.SecretName}, &s); err != nil {
				return nil, fmt.Errorf("volume %s: %w", m.Name, err)
			}
			for key, data := range s.Data {
				if err := os.WriteFile(filepath.Join(dir, key), data, 0o600); err != nil {
					return nil, err
				}
			}
		case v.Projected != nil:
			// The ServiceAccount token volume: the kubeconfig carries the token.
		default:
			return nil, fmt.Errorf("volume %s: kind not emulated", m.Name)
		}
		mounts[m.MountPath] = dir
	}
	return mounts, nil
}

// kubeconfigFor requests a token for the pod's ServiceAccount, bound to the
// pod, and writes a kubeconfig with it and the cluster's CA.
func (k *Kubelet) kubeconfigFor(ctx context.Context, pod *corev1.Pod, podDir string) (string, error) {
	cs, err := kubernetes.NewForConfig(k.c.RESTConfig())
	if err != nil {
		return "", err
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", pod.Namespace, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: k.c.APIServerURL(), CertificateAuthorityData: k.c.CABundle()}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "sa", Namespace: pod.Namespace}
	cfg.CurrentContext = "sa"
	path := filepath.Join(podDir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// waitReady polls the readiness probe until it first answers and marks the
// pod Running and Ready (a pod without a probe is Ready once started); then
// it keeps probing as the kubelet does (probeLoop) until the process exits.
func (k *Kubelet) waitReady(pod *corev1.Pod, ctr corev1.Container, p *PodProcess) {
	url := probeURL(ctr, p.IP)
	hc := k.c.HTTPClient()
	hc.Timeout = 2 * time.Second
	for {
		select {
		case <-p.Exited:
			return
		default:
		}
		if url == "" {
			break
		}
		if probe(hc, url) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	k.markReady(pod, p)
	p.ready.Store(true)
	if url != "" {
		k.probeLoop(pod, ctr.ReadinessProbe, url, p)
	}
}

// probeURL is the address of the container's HTTP readiness probe at ip,
// or "" without one.
func probeURL(ctr corev1.Container, ip string) string {
	pr := ctr.ReadinessProbe
	if pr == nil || pr.HTTPGet == nil {
		return ""
	}
	port := pr.HTTPGet.Port.IntValue()
	if pr.HTTPGet.Port.Type == intstr.String {
		for _, cp := range ctr.Ports {
			if cp.Name == pr.HTTPGet.Port.StrVal {
				port = int(cp.ContainerPort)
			}
		}
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + pr.HTTPGet.Path
}

// probe reports whether url answers 200 within hc's timeout.
func probe(hc *http.Client, url string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// probeLoop probes every periodSeconds with timeoutSeconds, as the kubelet
// does once the pod is Ready: failureThreshold failures in a row mark the
// pod not Ready (the EndpointSlice controller then takes its address out of
// the Service), successThreshold successes in a row mark it Ready again. A
// frozen process accepts connections (the kernel does) but never answers:
// its probes time out. The loop ends when the process exits.
func (k *Kubelet) probeLoop(pod *corev1.Pod, pr *corev1.Probe, url string, p *PodProcess) {
	st := newReadiness(pr)
	hc := k.c.HTTPClient()
	hc.Timeout = st.timeout
	t := time.NewTicker(st.period)
	defer t.Stop()
	for {
		select {
		case <-p.Exited:
			return
		case <-t.C:
		}
		ok := probe(hc, url)
		changed, ready := st.observe(ok)
		if !changed || p.done() {
			continue
		}
		if ready {
			k.logf("%s/%s: readiness probe passed %d times in a row: Ready", pod.Namespace, pod.Name, st.successThreshold)
			p.ready.Store(true)
			k.markReady(pod, p)
			continue
		}
		k.logf("%s/%s: readiness probe failed %d times in a row: not Ready", pod.Namespace, pod.Name, st.failureThreshold)
		// First, so that syncPod does not take the pod's not-Ready
		// status for the node lifecycle controller's and undo it.
		p.ready.Store(false)
		k.markNotReady(pod, p)
	}
}

// readiness counts a readiness probe's results as the kubelet does, with
// the kubelet's defaults for unset fields.
type readiness struct {
	period, timeout                    time.Duration
	failureThreshold, successThreshold int
	ready                              bool
	failures, successes                int
}

func newReadiness(pr *corev1.Probe) *readiness {
	r := &readiness{period: 10 * time.Second, timeout: time.Second, failureThreshold: 3, successThreshold: 1, ready: true}
	if pr.PeriodSeconds > 0 {
		r.period = time.Duration(pr.PeriodSeconds) * time.Second
	}
	if pr.TimeoutSeconds > 0 {
		r.timeout = time.Duration(pr.TimeoutSeconds) * time.Second
	}
	if pr.FailureThreshold > 0 {
		r.failureThreshold = int(pr.FailureThreshold)
	}
	if pr.SuccessThreshold > 0 {
		r.successThreshold = int(pr.SuccessThreshold)
	}
	return r
}

// observe counts one probe result and reports whether the pod's readiness
// changed with it, and what it is now.
func (r *readiness) observe(ok bool) (changed, ready bool) {
	if ok {
		r.failures = 0
		r.successes++
		if !r.ready && r.successes >= r.successThreshold {
			r.ready = true
			return true, true
		}
		return false, r.ready
	}
	r.successes = 0
	r.failures++
	if r.ready && r.failures >= r.failureThreshold {
		r.ready = false
		return true, false
	}
	return false, r.ready
}

// markReady writes the pod as Running and Ready.
func (k *Kubelet) markReady(pod *corev1.Pod, p *PodProcess) { k.markRunning(pod, p, true) }

// markNotReady writes the pod as Running but not Ready: its process runs
// and fails its readiness probe.
func (k *Kubelet) markNotReady(pod *corev1.Pod, p *PodProcess) { k.markRunning(pod, p, false) }

// markRunning writes the pod as Running, Ready or not.
func (k *Kubelet) markRunning(pod *corev1.Pod, p *PodProcess, ready bool) {
	ctr := pod.Spec.Containers[0]
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	k.setStatus(pod, p, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		st.StartTime = ptr.To(metav1.NewTime(p.Started))
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: ctr.Name, Image: ctr.Image, ImageID: p.ImageID, Ready: ready, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.Started)}},
		}}
		setConditions(st, cond)
	})
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// exited writes the pod's end: Succeeded or Failed for a pod that does not
// restart (a Job's), not Ready for the others.
func (k *Kubelet) exited(pod *corev1.Pod, p *PodProcess) {
	code := p.Cmd.ProcessState.ExitCode()
	k.setStatus(pod, p, func(st *corev1.PodStatus) {
		if pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
			st.Phase = corev1.PodSucceeded
			if code != 0 {
				st.Phase = corev1.PodFailed
			}
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, ImageID: p.ImageID,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: int32(code), Reason: reason, StartedAt: metav1.NewTime(p.Started), FinishedAt: metav1.Now(),
			}},
		}}
		setConditions(st, corev1.ConditionFalse)
	})
}

func setConditions(st *corev1.PodStatus, ready corev1.ConditionStatus) {
	now := metav1.Now()
	st.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
	}
}

// setStatus writes the pod's status (retrying conflicts); the pod's IP and
// its node's IP are always set.
func (k *Kubelet) setStatus(pod *corev1.Pod, p *PodProcess, edit func(*corev1.PodStatus)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		var cur corev1.Pod
		if err := k.kube.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return // gone
		}
		if cur.UID != p.UID {
			return
		}
		edit(&cur.Status)
		cur.Status.PodIP = p.IP
		cur.Status.PodIPs = []corev1.PodIP{{IP: p.IP}}
		cur.Status.HostIP = "127.0.0.1"
		cur.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		err := k.kube.Status().Update(ctx, &cur)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			k.logf("updating the status of %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
