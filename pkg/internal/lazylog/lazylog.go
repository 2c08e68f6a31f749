// Package lazylog defers a logger's key/value pairs until a line is written.
//
// controller-runtime gives every reconcile a logger with the controller's
// and the object's names and a reconcile ID (two WithValues calls), and zap
// encodes those values as soon as they are added. The placement leader
// reconciles each pod of a burst several times and writes a log line for
// almost none of them: the eager encoding cost a twentieth of its CPU.
// Wrapped here, WithValues only remembers the pairs, and they are encoded
// when a line is actually written, in the same order as before.
package lazylog

import (
	"slices"

	"github.com/go-logr/logr"
)

// New returns logger with its values deferred.
func New(logger logr.Logger) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	if _, ok := sink.(*lazySink); ok {
		return logger
	}
	return logr.New(&lazySink{sink: sink})
}

// lazySink holds the values added since the underlying sink was last given
// any. It adds a stack frame between the caller and the underlying sink,
// which it tells the sink (Init, WithCallDepth), so a logged caller stays
// right.
type lazySink struct {
	sink logr.LogSink
	kv   []any
}

var (
	_ logr.LogSink          = (*lazySink)(nil)
	_ logr.CallDepthLogSink = (*lazySink)(nil)
)

func (l *lazySink) Init(info logr.RuntimeInfo) {
	info.CallDepth++
	l.sink.Init(info)
}

func (l *lazySink) Enabled(level int) bool { return l.sink.Enabled(level) }

func (l *lazySink) Info(level int, msg string, kv ...any) {
	l.materialized().Info(level, msg, kv...)
}

func (l *lazySink) Error(err error, msg string, kv ...any) {
	l.materialized().Error(err, msg, kv...)
}

// WithValues remembers kv; slices.Clip makes the next append copy, so two
// loggers derived from one never share their pending values.
func (l *lazySink) WithValues(kv ...any) logr.LogSink {
	return &lazySink{sink: l.sink, kv: append(slices.Clip(l.kv), kv...)}
}

// WithName applies the pending values first: a name is part of what later
// values are added to.
func (l *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: l.materialized().WithName(name)}
}

func (l *lazySink) WithCallDepth(depth int) logr.LogSink {
	s, ok := l.sink.(logr.CallDepthLogSink)
	if !ok {
		return l
	}
	return &lazySink{sink: s.WithCallDepth(depth), kv: l.kv}
}

func (l *lazySink) materialized() logr.LogSink {
	if len(l.kv) == 0 {
		return l.sink
	}
	return l.sink.WithValues(l.kv...)
}
