package catalog

import (
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// ReadNodePools reads karpenter.sh/v1 NodePools from a YAML or JSON stream of
// one or more documents (a NodePoolList, or `kubectl get nodepools -o yaml`,
// also works). Documents of other kinds are skipped.
func ReadNodePools(r io.Reader) ([]*karpv1.NodePool, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*karpv1.NodePool
	for doc := 1; ; doc++ {
		var head struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Items      []karpv1.NodePool `json:"items"`
			karpv1.NodePool
		}
		err := dec.Decode(&head)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", doc, err)
		}
		switch {
		case head.Kind == "NodePool" && head.APIVersion == apis.Group+"/v1":
			np := head.NodePool
			if np.Name == "" {
				return nil, fmt.Errorf("document %d: NodePool without metadata.name", doc)
			}
			out = append(out, &np)
		case head.Kind == "NodePoolList" || head.Kind == "List":
			for i := range head.Items {
				if head.Items[i].Kind == "NodePool" || head.Kind == "NodePoolList" {
					out = append(out, &head.Items[i])
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no karpenter.sh/v1 NodePool in the input")
	}
	return out, nil
}
