package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/test/quota"
)

// rollout is what a Deployment's or StatefulSet's spec asks for: its
// replicas, and its pod template's revision as the soak's rollouts mark it
// (rolloutAnnotation). The soak reads its pods rather than its status: on
// a loaded machine the controller-manager's status updates lag the pods by
// minutes.
type rollout struct {
	replicas int32
	revision string
}

func deploymentRollout(d *appsv1.Deployment) rollout {
	return rollout{replicas: ptrValue(d.Spec.Replicas), revision: d.Spec.Template.Annotations[rolloutAnnotation]}
}

func statefulSetRollout(st *appsv1.StatefulSet) rollout {
	return rollout{replicas: ptrValue(st.Spec.Replicas), revision: st.Spec.Template.Annotations[rolloutAnnotation]}
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// verdict is one workload's sample.
type verdict int

const (
	unsettled verdict = iota
	// fellBack: settled, but some pod was placed while a group was out
	// of capacity (apportion.dev/fallback): the quota is not owed.
	fellBack
	// survivor: settled, but some pod survived a scale-down that removed a
	// not-ready pod first (tracker.notReadyRemoved), which no
	// pod-deletion-cost steers: the split is not owed.
	survivor
	// withUndecided: settled, but some pod has no decision (admitted while
	// the webhook did not answer, counted as such): apportion did not place
	// it, so the split is not owed either.
	withUndecided
	withinQuota
	offQuota
)

// sampleResult is a workload's verdict and, when off quota, why.
type sampleResult struct {
	verdict verdict
	why     string
}

// sampleWorkload checks one workload: settled when no policy change is
// waiting for its rollout and as many pods as its replicas are live, each
// of its template's revision (no rollout in progress) and Running on a
// node; then its pods, counted by the labels of their nodes
// (quota.GroupOf), must be within quota of strategy (quota.At).
func sampleWorkload(strategy string, r rollout, dirty bool, pods []*corev1.Pod, nodes map[string]map[string]string, notReady removal) sampleResult {
	if dirty || int32(len(pods)) != r.replicas {
		return sampleResult{verdict: unsettled}
	}
	for _, p := range pods {
		// A pod on a node that is gone (a spot interruption) is on its
		// way out too.
		_, onNode := nodes[p.Spec.NodeName]
		if p.Status.Phase != corev1.PodRunning || !onNode || p.Annotations[rolloutAnnotation] != r.revision {
			return sampleResult{verdict: unsettled}
		}
	}
	for _, p := range pods {
		if _, ok := p.Annotations[annotations.Group]; !ok {
			return sampleResult{verdict: withUndecided}
		}
	}
	for _, p := range pods {
		if notReady.revision == r.revision && p.CreationTimestamp.Time.Before(notReady.at) {
			return sampleResult{verdict: survivor}
		}
	}
	for _, p := range pods {
		if _, ok := p.Annotations[annotations.Fallback]; ok {
			return sampleResult{verdict: fellBack}
		}
	}
	s, err := compiled.Parse(strategy)
	if err != nil {
		return sampleResult{verdict: offQuota, why: fmt.Sprintf("strategy %q: %v", strategy, err)}
	}
	counts := map[string]int64{}
	for _, p := range pods {
		counts[quota.GroupOf(s.Strategy, nodes[p.Spec.NodeName], p.Annotations[annotations.Group])]++
	}
	if off := quota.At(s, counts); !off.Within() {
		return sampleResult{verdict: offQuota, why: off.String() + otherStrategies(s, pods)}
	}
	return sampleResult{verdict: withinQuota}
}

// pendingPod is a pod Pending past its capacity timeout, and why.
type pendingPod struct {
	Pod       string `json:"pod"`
	Age       string `json:"age"`
	Apportion bool   `json:"becauseOfApportion"`
	Why       string `json:"why"`
}

// pendingPast lists the pods Pending longer than limit at now. A pod still
// held by the placement gate, or decided and unschedulable, is pending
// because of apportion (its decision, or its capacity fallback that did
// not move it); an undecided pod is the cluster's.
func pendingPast(pods map[string][]*corev1.Pod, limit time.Duration, now time.Time) []pendingPod {
	var out []pendingPod
	for _, list := range pods {
		for _, p := range list {
			age := now.Sub(p.CreationTimestamp.Time)
			if p.Status.Phase != corev1.PodPending || age <= limit {
				continue
			}
			pp := pendingPod{Pod: p.Namespace + "/" + p.Name, Age: age.Round(time.Second).String()}
			cond := ""
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
					cond = strings.TrimSpace(c.Reason + ": " + firstLine(c.Message))
				}
			}
			switch g := p.Annotations[annotations.Group]; {
			case decision.HasGate(p):
				pp.Apportion, pp.Why = true, "held by the placement gate"
			case g != "":
				pp.Apportion = p.Spec.NodeName == ""
				pp.Why = fmt.Sprintf("decided %s on NodePool %s", g, p.Annotations[annotations.NodePool])
				if f := p.Annotations[annotations.Fallback]; f != "" {
					pp.Why += " (fallback from " + f + ")"
				}
			default:
				pp.Why = "no decision"
			}
			switch {
			case p.Spec.NodeName != "":
				pp.Why += "; bound to " + p.Spec.NodeName + ", not Running yet"
			case cond != "":
				pp.Why += "; " + cond
			}
			out = append(out, pp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// otherStrategies says how many pods were decided under another strategy
// than s, by their decision records; "" when none was.
func otherStrategies(s *compiled.Strategy, pods []*corev1.Pod) string {
	want := decision.StrategyHash(s.Strategy)
	other := map[string]int{}
	for _, p := range pods {
		var rec decision.Record
		if json.Unmarshal([]byte(p.Annotations[annotations.Decision]), &rec) == nil && rec.Strategy != want {
			other[rec.Strategy]++
		}
	}
	if len(other) == 0 {
		return ""
	}
	return fmt.Sprintf(" (decided under other strategies than %s: %v)", want, other)
}
