// Package cluster runs a real, throw-away Kubernetes control plane for the
// e2e tests and the demo: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and, on request, Karpenter's kwok provider with the kwok
// controller, all built by test/tools/build.sh.
//
// # One private network namespace
//
// Karpenter binds its metrics and health ports on every interface and has no
// option to change that, and only loopback traffic is allowed on the machines
// this runs on. So every component runs inside one private network namespace
// whose only interface is lo: nothing in it can reach, or be reached from, any
// other address, and two clusters never collide on a port.
//
// The namespace is created by the launching process itself (unshare on a
// locked OS thread, which then returns to the host namespace) and is pinned by
// an open file descriptor, so no bind mount or named namespace is ever left
// behind: it disappears with the last process or descriptor that refers to it.
// Components are started through nsenter(1) on that descriptor; nsenter execs
// in place, so the pid we hold is the component's own. nsenter opens the
// namespace by the descriptor's /proc/<launcher pid>/fd/<n> path, which
// exists only while the launching process runs: a process counts as started
// only once it is inside the namespace (its /proc/<pid>/ns/net is ours), so
// a launcher may exit as soon as Start returns.
//
// Reaching the API server:
//   - from the test process: RESTConfig and Client dial from inside the
//     namespace (a short setns on a locked thread per connection; the socket
//     keeps its namespace afterwards), so no port is exposed for them;
//   - from a process the test starts: Command and StartProcess run it inside
//     the namespace, where Kubeconfig works as is;
//   - from the host (kubectl while debugging, the demo): the API server port
//     is chosen free on the host too, and a forwarder that listens on host
//     127.0.0.1 and dials into the namespace makes the same Kubeconfig work
//     there. It runs as a goroutine of the launching process, or, in detached
//     mode, as a small process that holds both ends. Start checks /readyz
//     through it from the host.
//
// A webhook the API server must call has to listen inside the namespace:
// start it with Command or StartProcess, or, for a server in the test process,
// take its listener from Listen. IssueServingCert and CABundle give it a
// certificate the API server trusts for https://127.0.0.1:PORT.
//
// # Pods, pod IPs and Services
//
// kwok plays kubelet for the nodes Karpenter creates. It gives pods IPs from
// PodCIDR, 10.244.0.0/16 (its --cidr flag; kwok would prefer a node's
// spec.podCIDR, which nothing sets here: the controller-manager does not
// allocate node CIDRs), apart from the ClusterIPs, 10.0.0.0/24. Nothing
// routes either range, and there is no kube-proxy: the API server dials the
// Services of webhooks (and aggregated APIs) at their endpoints, i.e. the pod
// IPs (--enable-aggregator-routing). So a webhook served by the test behind a
// Service works once its pod's IP is on lo: AddLoopbackAddress puts it there,
// then Listen on it.
//
// A pod labelled ProcessPodLabel (any value) is one whose process the test
// runs itself: kwok's pod-ready and pod-complete stages leave it alone, so it
// stays Pending, not Ready and without an IP until the test writes its status
// (Running and Ready with a pod IP, or Succeeded), and once deleted it stays
// until the test removes it (grace period 0). The launcher writes kwok's
// stages, those of build.sh's stages.yaml with that exclusion added to the
// selectors of pod-ready, pod-complete and pod-delete, into the run folder.
//
// # Shutdown
//
// Stop stops processes in the reverse order of their start: extra processes,
// kwok, Karpenter, scheduler, controller-manager, then the API server (waiting
// for it to exit: with etcd gone first it ignores SIGTERM), then etcd; each
// gets SIGTERM, then SIGKILL on its process group after a grace period. Then
// the run folder goes. The same happens on SIGINT/SIGTERM, and StartForTest
// does it shortly before the test binary's -timeout. If the launching process
// dies without a chance to clean up, every component gets SIGKILL from the
// kernel (parent-death signal) and a tiny watchdog shell removes the run folder.
//
// # Detached mode
//
// Options.Detached starts a cluster that outlives the launching process (for
// `make demo`): the components get their own session, their output in their
// log files and no parent-death signal, a forwarder process serves the host
// port, and a state file in Options.StateDir records the pids and folders so
// that StopDetached can stop everything in the same order later, from
// another process. Start returns once the API server answers on the host
// port through the forwarder.
package cluster
