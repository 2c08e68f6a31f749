package strategy

import (
	"strings"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Source tells where a strategy was found: an annotation, a
// PlacementPolicy or a ClusterPlacementPolicy.
type Source struct {
	// Annotation is the annotation name the strategy was written under.
	Annotation string
	// Template is true when it came from the pod template rather than the
	// workload's own metadata.
	Template bool
	// Policy is "namespace/name" of the PlacementPolicy that gave the
	// strategy (no annotation then), or the ClusterPlacementPolicy's name.
	Policy string
	// Cluster is true when Policy names a ClusterPlacementPolicy.
	Cluster bool
	// Owner is "Kind name" of the object above the workload the
	// annotation was found on (a Job's CronJob); "" for the workload's own.
	Owner string
}

func (s Source) String() string {
	if s.Cluster {
		return "ClusterPlacementPolicy " + s.Policy
	}
	if s.Policy != "" {
		return "PlacementPolicy " + s.Policy
	}
	if s.Template {
		return "spec.template.metadata.annotations[" + s.Annotation + "]"
	}
	if s.Owner != "" {
		return s.Owner + " metadata.annotations[" + s.Annotation + "]"
	}
	return "metadata.annotations[" + s.Annotation + "]"
}

// PodAnnotations are the annotations Find reads. A pod's own annotations are
// one of the levels it is given, so an informer cache of pods keeps these.
var PodAnnotations = append([]string{annotations.LegacyEnabled}, annotations.StrategyNames...)

// Find returns the raw strategy written on a workload: the workload's own
// annotations are looked at first, then its pod template's; at each level the
// names of annotations.StrategyNames are tried in order. The legacy
// CustomPodScheduleStrategy annotation is ignored when the same object says
// UseCustomKubeScheduler is anything but "true".
func Find(workload, template map[string]string) (value string, src Source, found bool) {
	for _, level := range []struct {
		annotations map[string]string
		template    bool
	}{{workload, false}, {template, true}} {
		for _, name := range annotations.StrategyNames {
			v, ok := level.annotations[name]
			if !ok {
				continue
			}
			if name == annotations.LegacyCamelStrategy {
				if on, set := level.annotations[annotations.LegacyEnabled]; set && !strings.EqualFold(strings.TrimSpace(on), "true") {
					continue
				}
			}
			return v, Source{Annotation: name, Template: level.template}, true
		}
	}
	return "", Source{}, false
}
