package workload

import (
	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Answer is a workload's resolution in words: what `apportion plan -f` and
// `apportion explain` print of it, from the same Info, so that the same
// objects read the same offline and on a live cluster. Its JSON keys are
// those of both commands' JSON output.
type Answer struct {
	// Strategy is the strategy that applies (a policy's in its canonical
	// form); Source where it comes from.
	Strategy string `json:"strategy,omitempty"`
	Source   string `json:"source,omitempty"`
	// Why says why Source wins when policies are in play.
	Why string `json:"why,omitempty"`
	// Mode is required, preferred or shadow; ModeSource where it is set
	// ("" for the default).
	Mode       string `json:"mode"`
	ModeSource string `json:"modeSource,omitempty"`
	// NotPlaced says why apportion leaves the workload's pods alone (no
	// strategy, an invalid one, an opt-out); "" when it places them.
	NotPlaced string `json:"notPlaced,omitempty"`
	// Invalid is the fault of an invalid strategy.
	Invalid string `json:"invalid,omitempty"`
	// Problems are the apportion.dev/* annotations not taken as written,
	// one line each, with where they are.
	Problems []string `json:"problems,omitempty"`
}

// Reasons a workload is not placed.
const (
	NotPlacedNoStrategy   = "no strategy: no " + annotations.Strategy + " annotation on the workload or its pod template, and no PlacementPolicy or ClusterPlacementPolicy applies to it"
	NotPlacedOptedOut     = "opted out (" + annotations.Skip + `: "true")`
	NotPlacedArchitecture = "no strategy: placed by architecture alone (" + annotations.Architectures + ": " + annotations.ArchitecturesAuto + ")"
	NotPlacedInvalid      = "invalid strategy: its pods are placed without apportion"
)

// Answer says info in words. chain is what info was resolved from (for
// where the strategy is written).
func (i *Info) Answer(chain *Chain) Answer {
	a := Answer{Why: i.Why, Mode: i.Mode, ModeSource: i.ModeSource, Invalid: i.Invalid}
	if i.Found {
		a.Strategy, a.Source = i.Strategy, DescribeSource(chain, i.Source)
	}
	for _, p := range i.Problems {
		a.Problems = append(a.Problems, p.Located())
	}
	switch {
	case i.Skip:
		a.NotPlaced = NotPlacedOptedOut
	case !i.Found && i.ArchitecturesAuto:
		a.NotPlaced = NotPlacedArchitecture
	case !i.Found:
		a.NotPlaced = NotPlacedNoStrategy
		for _, p := range i.Problems {
			if s := annotations.Suggest(p.Key); s == annotations.Strategy {
				a.NotPlaced += "; " + p.Key + " is not an apportion annotation: did you mean " + s + "?"
				break
			}
		}
	case i.Invalid != "":
		a.NotPlaced = NotPlacedInvalid
	}
	if i.SkipRefused {
		a.Why = JoinWhy(a.Why, "its "+annotations.Skip+" is ignored: the policy sets allowSkip: false")
	}
	return a
}

// DescribeSource says where src is written on chain: "Deployment web
// metadata.annotations[apportion.dev/strategy]", "Job j
// spec.template.metadata.annotations[...]", "CronJob c
// metadata.annotations[...]", "PlacementPolicy ns/name",
// "ClusterPlacementPolicy name".
func DescribeSource(chain *Chain, src strategy.Source) string {
	kind := chain.Top.GroupVersionKind().Kind
	switch {
	case src.Policy != "":
		return src.String()
	case src.Template && src.Owner != "":
		// A WorkflowTemplate's spec.podMetadata.
		return src.Owner + " " + chain.templateAt() + "[" + src.Annotation + "]"
	case src.Template:
		return kind + " " + chain.Top.Name + " " + chain.templateAt() + "[" + src.Annotation + "]"
	case src.Owner != "":
		return src.String()
	}
	return kind + " " + chain.Top.Name + " " + src.String()
}

// JoinWhy adds more to a why, after "; ".
func JoinWhy(why, more string) string {
	if why == "" {
		return more
	}
	return why + "; " + more
}
