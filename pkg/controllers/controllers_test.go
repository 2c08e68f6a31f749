package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// readers are the packages handed pods from the informer cache, relative to
// this package's directory.
var readers = []string{".", "../decision", "../workload", "../strategy", "../policy"}

// external are the annotation keys of other modules that the readers may
// read, by the expression that names them.
var external = map[string]string{
	"corev1.PodDeletionCost":                 corev1.PodDeletionCost,
	"corev1.MirrorPodAnnotationKey":          corev1.MirrorPodAnnotationKey,
	"batchv1.JobCompletionIndexAnnotation":   batchv1.JobCompletionIndexAnnotation,
	"batchv1.JobIndexFailureCountAnnotation": batchv1.JobIndexFailureCountAnnotation,
}

// TestPodAnnotationsCoverReads: every annotation key read from an
// annotations map in the packages that get cached pods is one the pod cache
// keeps (PodAnnotations). A new read without its declaration would read
// empty from the cache and silently change a decision.
func TestPodAnnotationsCoverReads(t *testing.T) {
	kept := PodAnnotations()
	consts := constants(t, "../annotations", "annotations.")
	for k, v := range external {
		consts[k] = v
	}
	var files []string
	for _, dir := range readers {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	reads := 0
	for _, file := range files {
		local := constants(t, filepath.Dir(file), "")
		for _, r := range annotationReads(t, file) {
			key, ok := local[r.key]
			if !ok && !strings.Contains(r.key, ".") {
				continue // a variable, such as a loop over a declared list
			}
			if !ok {
				key, ok = consts[r.key]
			}
			if !ok {
				t.Errorf("%s: reads annotation %s, which this test cannot resolve: add it to external", r.pos, r.key)
				continue
			}
			reads++
			if !slices.Contains(kept, key) {
				t.Errorf("%s: reads annotation %q (%s) from a pod, but the pod cache drops it: declare it in the package's PodAnnotations and list that in PodAnnotations()", r.pos, key, r.key)
			}
		}
	}
	if reads < 10 {
		t.Fatalf("found only %d annotation reads in %v: the scan is broken", reads, readers)
	}
}

type read struct {
	pos token.Position
	key string // the key's expression: annotations.Group, Annotation
}

// annotationReads finds m[key] on an annotations map (a selector or call
// named Annotations or GetAnnotations, or a variable named annotations)
// whose key is a name, leaving out assignments to it.
func annotationReads(t *testing.T, file string) []read {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	written := map[ast.Expr]bool{}
	var out []read
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				written[l] = true
			}
		case *ast.IndexExpr:
			if written[n] || !isAnnotations(n.X) {
				return true
			}
			switch k := n.Index.(type) {
			case *ast.SelectorExpr:
				if pkg, ok := k.X.(*ast.Ident); ok {
					out = append(out, read{fset.Position(n.Pos()), pkg.Name + "." + k.Sel.Name})
				}
			case *ast.Ident:
				out = append(out, read{fset.Position(n.Pos()), k.Name})
			}
		}
		return true
	})
	return out
}

func isAnnotations(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.SelectorExpr:
		return strings.EqualFold(x.Sel.Name, "annotations")
	case *ast.Ident:
		return strings.EqualFold(x.Name, "annotations")
	case *ast.CallExpr:
		sel, ok := x.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "GetAnnotations"
	}
	return false
}

// constants are the string constants declared in dir (literals, other
// constants and their concatenations), named with prefix.
func constants(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]ast.Expr{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					v := s.(*ast.ValueSpec)
					for i, name := range v.Names {
						if i < len(v.Values) {
							exprs[name.Name] = v.Values[i]
						}
					}
				}
			}
		}
	}
	var eval func(ast.Expr, int) (string, bool)
	eval = func(x ast.Expr, depth int) (string, bool) {
		switch x := x.(type) {
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				s, err := strconv.Unquote(x.Value)
				return s, err == nil
			}
		case *ast.Ident:
			if e, ok := exprs[x.Name]; ok && depth < 10 {
				return eval(e, depth+1)
			}
		case *ast.BinaryExpr:
			a, okA := eval(x.X, depth+1)
			b, okB := eval(x.Y, depth+1)
			return a + b, okA && okB && x.Op == token.ADD
		case *ast.ParenExpr:
			return eval(x.X, depth+1)
		}
		return "", false
	}
	out := map[string]string{}
	for name, e := range exprs {
		if v, ok := eval(e, 0); ok {
			out[prefix+name] = v
		}
	}
	return out
}

// TestNoControllerImportsAnother: what two controllers share lives in a
// package named for it, below both, so that each controller can change (or
// go) on its own.
func TestNoControllerImportsAnother(t *testing.T) {
	const prefix = "github.com/apportion-dev/apportion/pkg/controllers"
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	controllers := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		controllers++
		err := filepath.WalkDir(d.Name(), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				own := prefix + "/" + d.Name()
				if strings.HasPrefix(p, prefix+"/") && p != own && !strings.HasPrefix(p, own+"/") {
					t.Errorf("%s imports %s: move what they share below pkg/controllers", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if controllers < 5 {
		t.Fatalf("found %d controller packages: the scan is broken", controllers)
	}
}
