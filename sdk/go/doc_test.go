package sdk

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every exported name of the package — functions, methods, types, constants, variables and
// the fields of exported structs — has a doc comment, so `go doc` documents the whole API.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		at := func(n ast.Node, what string) {
			missing = append(missing, fset.Position(n.Pos()).String()+": "+what)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil && !exportedReceiver(d.Recv) {
					continue
				}
				checked++
				if d.Doc == nil {
					at(d, "func "+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						checked++
						if s.Doc == nil && d.Doc == nil {
							at(s, "type "+s.Name.Name)
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									if n.IsExported() {
										checked++
										if field.Doc == nil && field.Comment == nil {
											at(field, "field "+s.Name.Name+"."+n.Name)
										}
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								checked++
								if s.Doc == nil && s.Comment == nil && d.Doc == nil {
									at(s, "value "+n.Name)
								}
							}
						}
					}
				}
			}
		}
		if f.Name.Name == "sdk" && name == "doc.go" && f.Doc == nil {
			missing = append(missing, "doc.go: the package comment")
		}
	}
	if checked < 100 {
		t.Fatalf("only %d exported names found: the check is not looking at the package", checked)
	}
	if len(missing) > 0 {
		t.Fatalf("exported names without a doc comment:\n%s", strings.Join(missing, "\n"))
	}
}

func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
