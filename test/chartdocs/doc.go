// Package chartdocs holds tests that keep the Helm chart's values.yaml,
// values.schema.json and the README's values table in step. They need no
// helm binary: `go test ./test/chartdocs/`.
//
// `go test ./test/chartdocs/ -run TestValuesTable -print-table` prints the
// table as it should be (defaults from values.yaml, descriptions from the
// schema), to paste into the README.
package chartdocs
