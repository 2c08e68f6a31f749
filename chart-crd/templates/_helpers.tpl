{{/*
The annotations every CRD of this chart carries besides controller-gen's.
make generate copies chart/crds/*.yaml into this folder and includes this
template under each CRD's metadata.annotations; every other .yaml here is
removed by make generate.

helm.sh/resource-policy: keep: helm uninstall apportion-crd leaves the CRDs,
and with them every PlacementPolicy of the cluster. To remove them too:
kubectl delete crd placementpolicies.apportion.dev
*/}}
{{- define "apportion-crd.annotations" -}}
helm.sh/resource-policy: keep
{{- end }}
