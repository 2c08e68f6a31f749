package imagearch

import (
	"context"
	"fmt"
	"sort"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
)

// Pod inspects every container and init container image of the pod with the
// pod's credentials (namespace, spec.serviceAccountName, spec.imagePullSecrets)
// and the containers' imagePullPolicy. Any image failing makes the whole call
// fail (the error names the container and image). The look-ups of the pod's
// images run in parallel.
func (i *Inspector) Pod(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	creds := Credentials{Namespace: pod.Namespace, ServiceAccountName: pod.Spec.ServiceAccountName}
	for _, s := range pod.Spec.ImagePullSecrets {
		if s.Name != "" {
			creds.ImagePullSecrets = append(creds.ImagePullSecrets, s.Name)
		}
	}
	type pending struct {
		container string
		key       string
		hit       *entry // cached answer, already counted
		slow      error  // ErrSlowRegistry, already counted
		ch        <-chan singleflight.Result
	}
	res := &Result{}
	var waits []pending
	seen := make(map[string]struct{}, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	visit := func(c *corev1.Container) {
		if _, ok := seen[c.Image]; ok {
			return
		}
		seen[c.Image] = struct{}{}
		res.Images = append(res.Images, Image{Reference: c.Image})
		p := pending{container: c.Name}
		if p.hit = i.cached(c.Image, c.ImagePullPolicy); p.hit == nil {
			p.key = flightKey(c.Image, creds)
			switch p.hit = i.cachedFor(p.key, c.Image, c.ImagePullPolicy); {
			case p.hit != nil:
			case i.slow.Has(p.key):
				p.slow = i.slowFlight(p.key, c.Image)
			default:
				p.ch = i.start(ctx, p.key, c.Image, c.ImagePullPolicy, creds)
			}
		}
		waits = append(waits, p)
	}
	for k := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[k])
	}
	for k := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[k])
	}
	for k, w := range waits {
		var ps []Platform
		var err error
		switch {
		case w.hit != nil:
			ps, err = w.hit.platforms, w.hit.err
		case w.slow != nil:
			err = w.slow
		default:
			ps, err = i.wait(ctx, w.key, res.Images[k].Reference, w.ch)
		}
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", w.container, err)
		}
		res.Images[k].Platforms = ps
	}
	res.Architectures = Intersect(res.Images)
	return res, nil
}

// Intersect returns the linux architectures every image runs on, sorted;
// empty (not nil) when they share none.
func Intersect(images []Image) []string {
	archs := []string{}
	if len(images) == 0 {
		return archs
	}
	for _, p := range images[0].Platforms {
		if p.OS == "linux" && !contains(archs, p.Architecture) {
			archs = append(archs, p.Architecture)
		}
	}
	for _, img := range images[1:] {
		kept := archs[:0]
		for _, a := range archs {
			if supports(img.Platforms, a) {
				kept = append(kept, a)
			}
		}
		archs = kept
	}
	sort.Strings(archs)
	return archs
}

func supports(ps []Platform, arch string) bool {
	for _, p := range ps {
		if p.OS == "linux" && p.Architecture == arch {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
