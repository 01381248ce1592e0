package problem

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

// Every Code constant has a title, and the table holds no other code.
func TestEveryCodeHasATitle(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "problem.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") {
					continue
				}
				v, _ := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				codes[v] = true
				if Titles[v] == "" {
					t.Errorf("%s (%q) has no title", n.Name, v)
				}
			}
		}
	}
	for c := range Titles {
		if !codes[c] {
			t.Errorf("title for %q, which is no Code constant", c)
		}
	}
}

func TestUnavailableKeepsItsCause(t *testing.T) {
	cause := errors.New("fsync: no space left on device")
	p := Unavailable(cause)
	if !errors.Is(p, cause) || !strings.Contains(p.Error(), "no space left") {
		t.Fatalf("cause lost: %v", p)
	}
	if d := p.Document("", ""); d.Detail == nil || strings.Contains(*d.Detail, "no space") {
		t.Fatalf("cause rendered: %+v", d)
	}
	if got := As(store.ErrUnavailable); got.Status != 503 || !errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("As(ErrUnavailable) = %+v", got)
	}
}

// A store at its disk reserve is a 503 backend_unavailable that says why,
// not the generic "could not make the change durable".
func TestNoSpaceProblem(t *testing.T) {
	p := As(fmt.Errorf("%w: %w", store.ErrUnavailable, store.ErrNoSpace))
	if p.Status != 503 || p.Code != CodeBackendUnavailable || !strings.Contains(p.Detail, "disk is nearly full") {
		t.Fatalf("%+v", p)
	}
	if p := As(fmt.Errorf("%w: fsync", store.ErrUnavailable)); strings.Contains(p.Detail, "disk") {
		t.Fatalf("%+v", p)
	}
}
