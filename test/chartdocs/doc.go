// Package chartdocs holds tests that keep the Helm chart and its docs in
// step: values.yaml, values.schema.json and the values table of
// chart/README.md (no helm binary needed), and the RBAC tables of
// docs/security.md against the rules chart/templates/rbac.yaml renders in
// every mode (TestRBACTable runs `helm template`: $HELM, else the helm
// test/tools/build.sh built, else one built from test/tools/helm):
// `go test -tags chart ./test/chartdocs/`.
//
// `go test -tags chart ./test/chartdocs/ -run TestValuesTable -print-table` prints the
// table as it should be (defaults from values.yaml, descriptions from the
// schema, plus a row without a default for each key the schema marks
// "deprecated": true and values.yaml no longer has), to paste into
// chart/README.md under "## Values".
package chartdocs
