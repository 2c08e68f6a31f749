package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// WriteLayout writes idx as the OCI image layout dir: oci-layout, index.json
// (one entry, the index, named refName when it is not empty) and blobs/. A
// layout already at dir is replaced whole; any other existing file or
// non-empty directory there is an error, never removed.
func WriteLayout(dir string, idx v1.ImageIndex, refName string) (err error) {
	dir = filepath.Clean(dir)
	if err := replaceable(dir); err != nil {
		return err
	}
	if refName != "" && !validRefName(refName) {
		return fmt.Errorf("ref name %q is not a valid tag", refName)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".ociimage-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{AnnotationRefName: refName}))
	}
	if err := lp.AppendIndex(idx, opts...); err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	// go-containerregistry writes index.json 0777 (less the umask) and the
	// layers 0600: make the layout uniformly readable, like a build output.
	if err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// replaceable reports whether WriteLayout may replace dir: it does not exist,
// or is an empty directory, or an OCI image layout.
func replaceable(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err == nil {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s exists and is not an OCI image layout: not replacing it", dir)
	}
	return nil
}

// WriteArchive writes the layout dir as the tar file out (an "oci-archive",
// which skopeo, podman and docker load read): every entry root-owned, files
// 0644, directories 0755, mtime mt, in lexical order, so it is as
// reproducible as the layout.
func WriteArchive(out, dir string, mt time.Time) (err error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".ociimage-*.tar")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	mt = mt.UTC().Truncate(time.Second)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mt, Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}
