package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/apportion-dev/apportion/pkg/version"
)

func newVersion() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of apportion",
		Long:  "Prints the release, the git commit, the build date, and the Go and Karpenter module versions apportion was built with.",
		Example: `  apportion version
  apportion version -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			if output == "" {
				_, err := fmt.Fprintln(w, version.String())
				return failedIf(err)
			}
			return failedIf(writeStructured(w, output, version.Get()))
		},
	}
	addOutputFlag(cmd.Flags(), &output, "", outputJSON, outputYAML)
	cmd.Flags().Lookup("output").Usage = "output format: json or yaml (default: one line of text)"
	return cmd
}

// failedIf marks a failure to write the output (a closed pipe) as exit 1.
func failedIf(err error) error {
	if err != nil {
		return failed(fmt.Errorf("writing output: %w", err))
	}
	return nil
}
