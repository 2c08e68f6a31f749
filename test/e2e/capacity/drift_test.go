//go:build e2e

package capacity_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/controllers/drift"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/test/framework"
)

// TestSplitDriftOnTaintedPool: the spot NodePool carries a NoSchedule taint
// the pods do not tolerate and no apportion.dev/tolerate opt-in, so the
// spot group is left out and all 8 pods run on on-demand. Past
// --drift-after the Deployment gets a SplitDrift Warning Event with both
// groups' numbers, and apportion_workload_drift is 1 for it.
func TestSplitDriftOnTaintedPool(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	d := deployment(ns, "web", "drift", 8, "100m", nil)
	create(t, d)
	running := waitRunning(t, ns, "web", 8, 3*time.Minute)
	if got := countByNode(t, "drift", running); got[onDemand] != 8 {
		t.Fatalf("pods by group %v, want all 8 on on-demand (spot is tainted and not opted in)", got)
	}
	settled := time.Now()
	// A sweep every 30 s: the drift starts at the first after the pods
	// run, and the Event comes at the first sweep past --drift-after.
	evs := eventsFor(t, ns, "web", drift.ReasonSplitDrift, 2*time.Minute)
	if len(evs) == 0 {
		t.Fatalf("no %s Event within 2m of the pods running\n%s", drift.ReasonSplitDrift, env.TailLog("apportion-1", 40))
	}
	t.Logf("SplitDrift %s after the pods ran: %s", time.Since(settled).Round(time.Second), evs[0].Message)
	msg := evs[0].Message
	for _, want := range []string{
		"off its strategy for ",
		"group 1 (" + onDemand + ") 8 running, quota 8, 8 wanted at 8 replicas",
		"group 2 (" + spot + ") 0 running, left out: ",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("SplitDrift message %q lacks %q", msg, want)
		}
	}
	if evs[0].Type != corev1.EventTypeWarning || evs[0].InvolvedObject.Kind != "Deployment" {
		t.Errorf("Event %s on %s, want a Warning on the Deployment", evs[0].Type, evs[0].InvolvedObject.Kind)
	}
	series := fmt.Sprintf(`apportion_workload_drift{kind="Deployment",name="web",workload_namespace=%q} `, ns)
	var last string
	framework.WaitFor(t, 40*time.Second, "apportion_workload_drift 1", func() error {
		text, err := env.Replicas[0].Metrics()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, series) {
				last = line
				if strings.TrimPrefix(line, series) == "1" {
					return nil
				}
			}
		}
		return fmt.Errorf("series %q: %q", series, last)
	})

	// explain and status say the same, from the cluster alone.
	var w explain.WorkloadReport
	out := env.KubectlApportion(t, "explain", "deployment/web", "-n", ns, "-o", "json")
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	if len(w.Drift) != 1 || !strings.Contains(w.Drift[0], "group 2 ("+spot+") is left out") || w.Groups[0].Actual != 8 || w.Groups[1].LeftOut == "" {
		t.Errorf("explain deployment/web: drift %q, groups %+v", w.Drift, w.Groups)
	}
	t.Logf("kubectl apportion explain deployment/web -n %s\n%s", ns, env.KubectlApportion(t, "explain", "deployment/web", "-n", ns))
	status := env.KubectlApportion(t, "status", "-n", ns)
	t.Logf("kubectl apportion status -n %s\n%s", ns, status)
	if !strings.Contains(status, "✗ group 2 ("+spot+") is left out") {
		t.Errorf("status shows no drift for web:\n%s", status)
	}
}
