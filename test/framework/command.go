package framework

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// Command is one of the repository's measuring programs (make bench-scale,
// make soak): Parse reads its flags, Timeout bounds a run of the options
// parsed, Run runs it and writes its report to out.
type Command[O any] struct {
	Name    string
	Parse   func(args []string, stderr io.Writer) (O, error)
	Timeout func(O) time.Duration
	Run     func(ctx context.Context, o O, out io.Writer) error
}

// Main runs c with args and returns the exit status: 0 after -h, 2 for bad
// flags, 1 when the run failed. It prints the run's wall time.
func (c Command[O]) Main(args []string) int {
	o, err := c.Parse(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout(o))
	defer cancel()
	start := time.Now()
	err = c.Run(ctx, o, os.Stdout)
	fmt.Fprintf(os.Stderr, "%s: wall time %s\n", c.Name, time.Since(start).Round(time.Second))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	return 0
}
