package server

import "fmt"

// Version is what the JavaScript runtime needs of a WorkerVersion 0.5.0
// record. It mirrors runtime/js.Version field for field; the server keeps
// its own type so that it builds and is tested without the runtime (the
// host converts).
type Version struct {
	UID        string
	Space      string
	WorkerUID  string
	Principal  string // the principal the version runs as (its creator)
	MainModule string
	Modules    []Module
	Vars       map[string]string
	Secrets    map[string]string
	Bindings   []Binding
}

// Module is one ES module of a WorkerVersion.
type Module struct{ Name, Content string }

// Binding is one queueProducerBindings entry.
type Binding struct{ Name, QueueUID string }

// CompileError is how Workers.Compile reports modules that do not load
// (the host converts runtime/js.CompileError to it).
type CompileError struct {
	File    string
	Line    int
	Column  int
	Message string
}

func (e *CompileError) Error() string {
	if e.File == "" {
		return e.Message
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
}
