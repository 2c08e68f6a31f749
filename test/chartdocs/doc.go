// Package chartdocs holds tests that keep the Helm chart and the README in
// step: values.yaml, values.schema.json and the README's values table
// (no helm binary needed), and the README's RBAC table against the rules
// chart/templates/rbac.yaml renders in every mode (TestRBACTable runs
// `helm template`: $HELM, else the helm test/tools/build.sh built, else one
// built from test/tools/helm): `go test ./test/chartdocs/`.
//
// `go test ./test/chartdocs/ -run TestValuesTable -print-table` prints the
// table as it should be (defaults from values.yaml, descriptions from the
// schema, plus a row without a default for each key the schema marks
// "deprecated": true and values.yaml no longer has), to paste into the
// README.
package chartdocs
