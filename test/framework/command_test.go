package framework

import (
	"context"
	"errors"
	"flag"
	"io"
	"testing"
	"time"
)

func TestCommandMain(t *testing.T) {
	ran := false
	c := Command[string]{
		Name: "test",
		Parse: func(args []string, _ io.Writer) (string, error) {
			switch args[0] {
			case "-h":
				return "", flag.ErrHelp
			case "bad":
				return "", errors.New("bad flag")
			}
			return args[0], nil
		},
		Timeout: func(string) time.Duration { return time.Minute },
		Run: func(ctx context.Context, o string, _ io.Writer) error {
			ran = true
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the run has no deadline")
			}
			if o == "fail" {
				return errors.New("failed")
			}
			return nil
		},
	}
	for _, tc := range []struct {
		arg  string
		code int
		ran  bool
	}{{"-h", 0, false}, {"bad", 2, false}, {"fail", 1, true}, {"ok", 0, true}} {
		ran = false
		if got := c.Main([]string{tc.arg}); got != tc.code || ran != tc.ran {
			t.Errorf("%s: exit %d (ran %t), want %d (ran %t)", tc.arg, got, ran, tc.code, tc.ran)
		}
	}
}
