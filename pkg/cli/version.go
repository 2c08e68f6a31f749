package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/apportion-dev/apportion/pkg/version"
)

// versionInfo is the output of `apportion version -o json|yaml`.
type versionInfo struct {
	Version          string `json:"version"`
	Commit           string `json:"commit"`
	BuildDate        string `json:"buildDate"`
	GoVersion        string `json:"goVersion"`
	KarpenterVersion string `json:"karpenterVersion"`
	Platform         string `json:"platform"`
}

// buildInfo gathers versionInfo from pkg/version and the binary's build
// information. The build date is not recorded yet: "unknown".
func buildInfo() versionInfo {
	info := versionInfo{
		Version: version.Version, Commit: version.Commit, BuildDate: "unknown",
		GoVersion: runtime.Version(), KarpenterVersion: "unknown",
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "sigs.k8s.io/karpenter" {
				info.KarpenterVersion = m.Version
				if m.Replace != nil {
					info.KarpenterVersion = m.Replace.Version
				}
			}
		}
	}
	return info
}

func newVersion() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of apportion",
		Long:  "Prints the release, the git commit and the Go version apportion was built with.",
		Example: `  apportion version
  apportion version -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			if output == "" {
				_, err := fmt.Fprintln(w, version.String())
				return failedIf(err)
			}
			return failedIf(writeStructured(w, output, buildInfo()))
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
