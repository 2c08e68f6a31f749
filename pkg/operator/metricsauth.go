package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/jellydator/ttlcache/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The caches of the --metrics-secure filter: what the API server answered,
// kept as long as controller-runtime's filter keeps it (a token a minute,
// whether accepted or not; a decision 5 minutes when allowed, 30 seconds
// when denied), and at most metricsAuthCacheSize answers of each kind, so
// callers sending new tokens cannot grow the memory.
const (
	metricsTokenTTL      = time.Minute
	metricsAllowTTL      = 5 * time.Minute
	metricsDenyTTL       = 30 * time.Second
	metricsReviewTimeout = 10 * time.Second
	metricsAuthCacheSize = 1024
)

// metricsAuth authenticates a /metrics caller's bearer token with a
// TokenReview and authorizes the request (its lowercased method on its
// path, a non-resource URL) with a SubjectAccessReview, as kubebuilder's
// default filter does (controller-runtime's metrics/filters), without
// k8s.io/apiserver: that filter brings the API server's authentication
// stack (CEL, gRPC, ...) into the binary, 32 MB of its 73.
type metricsAuth struct {
	tokens    authenticationclient.TokenReviewInterface
	access    authorizationclient.SubjectAccessReviewInterface
	users     *ttlcache.Cache[string, *authenticationv1.UserInfo] // sha256 of the token -> its user, nil when rejected
	decisions *ttlcache.Cache[string, bool]                       // the review's spec -> allowed
}

// metricsFilter is metricsserver.Options.FilterProvider for --metrics-secure.
func metricsFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	a := newMetricsAuth(authn.TokenReviews(), authz.SubjectAccessReviews())
	return a.filter, nil
}

func newMetricsAuth(tokens authenticationclient.TokenReviewInterface, access authorizationclient.SubjectAccessReviewInterface) *metricsAuth {
	return &metricsAuth{
		tokens: tokens,
		access: access,
		users: ttlcache.New(ttlcache.WithTTL[string, *authenticationv1.UserInfo](metricsTokenTTL),
			ttlcache.WithCapacity[string, *authenticationv1.UserInfo](metricsAuthCacheSize)),
		decisions: ttlcache.New(ttlcache.WithCapacity[string, bool](metricsAuthCacheSize)),
	}
}

func (a *metricsAuth) filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), metricsReviewTimeout)
		defer cancel()
		user, err := a.authenticate(ctx, req)
		if err != nil {
			log.Error(err, "authenticating a metrics request")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := a.authorize(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			log.Error(err, "authorizing a metrics request", "user", user.Username)
			http.Error(w, fmt.Sprintf("Authorization for user %s failed", user.Username), http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", user.Username), http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}

// authenticate returns the user of the request's bearer token; nil (and
// no error) without a token or when the API server rejects it.
func (a *metricsAuth) authenticate(ctx context.Context, req *http.Request) (*authenticationv1.UserInfo, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" || strings.Contains(token, " ") {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if item := a.users.Get(key); item != nil {
		return item.Value(), nil
	}
	review, err := a.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated && review.Status.User.Username != "" {
		user = review.Status.User.DeepCopy()
	}
	a.users.Set(key, user, ttlcache.DefaultTTL)
	return user, nil
}

// authorize asks whether user may verb the non-resource URL path.
func (a *metricsAuth) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	keyBytes, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}
	key := string(keyBytes)
	if item := a.decisions.Get(key); item != nil {
		return item.Value(), nil
	}
	review, err := a.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := review.Status.Allowed && !review.Status.Denied
	ttl := metricsDenyTTL
	if allowed {
		ttl = metricsAllowTTL
	}
	a.decisions.Set(key, allowed, ttl)
	return allowed, nil
}
