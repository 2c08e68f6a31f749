package webhook

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/scope"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Config is what the admission webhooks read.
type Config struct {
	// Reader is the informer cache.
	Reader client.Reader
	// Writer labels namespaces (options.WebhookScopeNamespaces).
	Writer   client.Writer
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// Policies gives strategies from PlacementPolicies; nil without their
	// CRD.
	Policies workload.PolicySource
	// Clusters reads ClusterPlacementPolicies (with the namespace cache),
	// for the validators to label the namespaces they cover; nil without
	// the PlacementPolicy CRD.
	Clusters *policy.Source
	// Lease is the placement Lease as its informer shows it (the
	// controllers register its handler); nil without leader election.
	Lease   *lease.Watch
	Options *options.Options
}

// Handlers are apportion's admission webhooks, by the path each is served
// at (the chart's webhook configurations name the same paths).
func Handlers(c Config) map[string]admission.Handler {
	o := c.Options
	var marker *scope.Marker
	if o.WebhookScope == options.WebhookScopeNamespaces {
		marker = &scope.Marker{Reader: c.Reader, Writer: c.Writer, Excluded: sets.New(o.Excluded()...)}
	}
	return map[string]admission.Handler{
		PodMutatorPath: &PodMutator{
			Reader:        c.Reader,
			Leader:        &LeaseLiveness{Lease: c.Lease, Clock: c.Clock, Grace: o.LeaseDuration, Disabled: !o.LeaderElect},
			Recorder:      c.Recorder,
			Excluded:      sets.New(o.Excluded()...),
			Policies:      c.Policies,
			Architectures: o.Architectures,
			Profiles:      o.Profiles(),
			DefaultMode:   o.DefaultMode,
		},
		WorkloadValidatorPath:      WorkloadValidator{Marker: marker, Clusters: c.Clusters},
		PolicyValidatorPath:        PolicyValidator{Marker: marker},
		ClusterPolicyValidatorPath: ClusterPolicyValidator{Marker: marker, Clusters: c.Clusters},
	}
}
