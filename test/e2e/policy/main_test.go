//go:build e2e

// Package policy_test runs `apportion webhook` against a real control plane
// with Karpenter's kwok provider (test/cluster) and checks PlacementPolicies
// end to end: a policy places a Deployment that carries no annotation, its
// status shows the split, an edit applies to new pods only, the oldest of two
// policies wins, a workload's own annotation wins, an invalid strategy is
// refused at apply with the parser's message, seed 001's distribution form
// works, a workload whose policy leaves shadow mode places its new pods
// around the running ones, and the pods whose placement a
// ValidatingAdmissionPolicy refuses are released unchanged.
package policy_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/webhook"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	gateTimeout = 30 * time.Second
	replicas    = 2
)

// env is the cluster and the replicas every test shares; its client knows
// PlacementPolicies.
var env framework.Suite

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.RunSuite(m, &env, framework.SuiteOptions{
		Name: "policy", NodePools: true,
		Prepare: func(ctx context.Context, s *framework.Suite) error {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				return err
			}
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				return err
			}
			karpenter := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
			scheme.AddKnownTypes(karpenter, &karpv1.NodePool{}, &karpv1.NodePoolList{})
			metav1.AddToGroupVersion(scheme, karpenter)
			kube, err := client.New(s.C.RESTConfig(), client.Options{Scheme: scheme})
			if err != nil {
				return err
			}
			s.Kube = kube
			if err := framework.Apply(ctx, s.Kube, filepath.Join(framework.RepoRoot(), "chart", "crds")); err != nil {
				return err
			}
			return waitCRD(ctx)
		},
		Replicas: replicas, GateTimeout: gateTimeout,
		Ready: func(ctx context.Context, s *framework.Suite) error {
			return registerPolicyWebhook(ctx, s.C.CABundle(), s.LB.Port)
		},
	}))
}

// waitCRD waits until PlacementPolicies and ClusterPlacementPolicies can be
// listed (the CRDs are established and the client's discovery knows them).
func waitCRD(ctx context.Context) error {
	for {
		var list v1alpha1.PlacementPolicyList
		err := env.Kube.List(ctx, &list)
		if err == nil {
			err = env.Kube.List(ctx, &v1alpha1.ClusterPlacementPolicyList{})
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the PlacementPolicy CRD: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// registerPolicyWebhook registers the PlacementPolicy validator by URL, as
// the chart's ValidatingWebhookConfiguration does (failure policy Ignore: a
// policy is never blocked by an unavailable webhook, only refused by one
// that answers).
func registerPolicyWebhook(ctx context.Context, caBundle []byte, port int) error {
	ignore := admissionregistrationv1.Ignore
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apportion-placementpolicies"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "placementpolicies.apportion.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + webhook.PolicyValidatorPath), CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
					Resources: []string{"placementpolicies"}},
			}},
			FailurePolicy:           &ignore,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.Kube.Create(ctx, cfg); err != nil {
		return fmt.Errorf("registering the PlacementPolicy webhook: %w", err)
	}
	return nil
}
