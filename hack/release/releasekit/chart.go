package releasekit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// NormalizeChart rewrites the chart archive path (what `helm package`
// writes) so that the same chart gives the same bytes: every entry gets
// the time mtime, owner 0:0 without names, and the gzip header no time or
// name. Entries keep their order, content and mode. helm package stamps the
// current time on every entry, so two runs on one commit differ without it.
func NormalizeChart(path string, mtime time.Time) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return err
	}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		hdr := &tar.Header{
			Typeflag: h.Typeflag, Name: h.Name, Linkname: h.Linkname, Size: h.Size,
			Mode: h.Mode, ModTime: mtime.UTC(),
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil { //nolint:gosec // a chart archive we just packaged
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
