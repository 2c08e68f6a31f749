// Package test holds the fixtures unit tests build Kubernetes objects from,
// in Karpenter's shape: a function per kind taking options that are merged
// onto what every test of that kind needs.
//
//   - scheme.go: Scheme, the kinds apportion reads (core, apps,
//     PlacementPolicy, Karpenter's NodePool and NodeClaim).
//   - owners.go: ControllerRef and OwnedBy (controller owner references),
//     Deployment, ReplicaSet (controlled by its Deployment) and Workload
//     (the web/nginx owner chain most controller tests place pods in).
//   - pods.go: Pod (owned, gated, scheduled, decided and signed as asked)
//     and Unschedulable (the condition the scheduler leaves).
//   - nodes.go: NodePool, NodeClaim, Node and Requirement.
//   - policies.go: PlacementPolicy.
//   - client.go: Objects (typed objects as client.Objects) and FailPatches,
//     a fake client's interceptor that refuses the first patches.
package test
