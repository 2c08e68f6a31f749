package main

import "testing"

func TestModel(t *testing.T) {
	m := newModel(1)
	kinds := map[string]int{}
	for _, w := range m.workloads {
		kinds[w.kind]++
	}
	if len(m.workloads) < 50 || kinds[kindDeployment] == 0 || kinds[kindStatefulSet] == 0 || kinds[kindJob] == 0 || kinds[kindCronJob] == 0 {
		t.Fatalf("workloads by kind: %v", kinds)
	}
	byKey := map[string]*workload{}
	for _, w := range m.workloads {
		byKey[w.key()] = w
	}
	pp, cpp := byKey["Deployment.pp-00"], byKey["Deployment.cpp-00"]
	// Precedence: the annotation, a PlacementPolicy, the churned cluster
	// policy, the base one.
	if got := m.strategyOf(byKey["Deployment.deploy-01"]); got != strategies[1] {
		t.Errorf("annotated: %q", got)
	}
	if got := m.strategyOf(pp); got != m.pp[pp.group] {
		t.Errorf("PlacementPolicy: %q", got)
	}
	delete(m.pp, pp.group)
	if got := m.strategyOf(pp); got != m.base {
		t.Errorf("PlacementPolicy deleted: %q, want the base cluster policy's", got)
	}
	if got := m.strategyOf(cpp); got != m.cluster {
		t.Errorf("cluster policy: %q", got)
	}
	m.cluster = ""
	if got := m.strategyOf(cpp); got != m.base {
		t.Errorf("cluster policy deleted: %q, want the base one's", got)
	}
	if got := m.strategyOf(byKey["Deployment.plain-00"]); got != "" {
		t.Errorf("not opted in: %q", got)
	}
	cpp.dirty = true
	views := m.views()
	seen := map[string]workloadView{}
	for _, v := range views {
		seen[v.key] = v
	}
	if _, ok := seen["Deployment.plain-00"]; ok {
		t.Error("a workload that did not opt in is sampled")
	}
	if _, ok := seen["Job.job-00"]; ok {
		t.Error("a Job is sampled")
	}
	if v := seen["Deployment.cpp-00"]; !v.dirty || v.strategy != m.base || v.ns != nsCluster {
		t.Errorf("view of cpp-00: %+v", v)
	}
}
