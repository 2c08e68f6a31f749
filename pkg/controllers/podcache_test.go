package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCachedPodsReadThroughView: the pod informer stores podcache.Pod, not
// *corev1.Pod, so what is handed the stored object (predicates, field
// indexers, event handlers) reads it through podcache.View; a type
// assertion to *corev1.Pod would see no pod at all, or panic. Tests with
// fake clients hold *corev1.Pod and would not notice: this scan does.
func TestCachedPodsReadThroughView(t *testing.T) {
	files := 0
	err := filepath.WalkDir(".", func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ta, ok := n.(*ast.TypeAssertExpr); ok && isCorePodPointer(ta.Type) {
				t.Errorf("%s: a type assertion to *corev1.Pod: use podcache.View", fset.Position(ta.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("scanned %d files: the scan is broken", files)
	}
}

func isCorePodPointer(x ast.Expr) bool {
	star, ok := x.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "corev1" && sel.Sel.Name == "Pod"
}
