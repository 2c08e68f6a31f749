package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

const completionLong = `Prints a shell completion script for bash, zsh, fish or PowerShell. Load it in the
current shell, or save it where the shell loads completions from.

As a kubectl plugin (kubectl apportion), kubectl completes the plugin's commands and flags
through an executable named kubectl_complete-apportion on $PATH that runs
"kubectl-apportion __complete" with its arguments (kubectl 1.26 or later); the last
example creates it.`

const completionExample = `  # bash, in the current shell (needs the bash-completion package)
  source <(apportion completion bash)

  # zsh, for every new shell
  apportion completion zsh > "${fpath[1]}/_apportion"

  # fish
  apportion completion fish > ~/.config/fish/completions/apportion.fish

  # PowerShell
  apportion completion powershell | Out-String | Invoke-Expression

  # kubectl apportion <TAB>: the helper kubectl looks for on $PATH
  printf '#!/bin/sh\nexec kubectl-apportion __complete "$@"\n' > /usr/local/bin/kubectl_complete-apportion
  chmod +x /usr/local/bin/kubectl_complete-apportion`

func newCompletion() *cobra.Command {
	var noDescriptions bool
	cmd := &cobra.Command{
		Use:                   "completion (bash|zsh|fish|powershell)",
		Short:                 "Print a shell completion script",
		Long:                  completionLong,
		Example:               completionExample,
		ValidArgs:             []string{"bash", "zsh", "fish", "powershell"},
		Args:                  completionArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			// The script completes the binary as it is named: run as
			// kubectl-apportion, that name, not apportion.
			if Program != root.Name() {
				saved := root.Use
				root.Use = PluginName
				defer func() { root.Use = saved }()
			}
			w := cmd.OutOrStdout()
			var err error
			switch args[0] {
			case "bash":
				err = root.GenBashCompletionV2(w, !noDescriptions)
			case "zsh":
				if noDescriptions {
					err = root.GenZshCompletionNoDesc(w)
				} else {
					err = root.GenZshCompletion(w)
				}
			case "fish":
				err = root.GenFishCompletion(w, !noDescriptions)
			case "powershell":
				if noDescriptions {
					err = root.GenPowerShellCompletion(w)
				} else {
					err = root.GenPowerShellCompletionWithDesc(w)
				}
			}
			return failedIf(err)
		},
	}
	cmd.Flags().BoolVar(&noDescriptions, "no-descriptions", false, "complete without a description of each command and flag")
	return cmd
}

// completionArgs takes exactly one shell among ValidArgs.
func completionArgs(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("name one shell: bash, zsh, fish or powershell (see %s --help)", c.CommandPath())
	}
	return cobra.OnlyValidArgs(c, args)
}
