package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ManifestFile is the manifest's name in a project directory.
const ManifestFile = "tako.yaml"

// Manifest is a project: the queues, workers and consumers of one space.
// It is YAML because the people who reach for this tool know it from
// kubectl and compose files, it takes comments, and the Host API's specs
// are JSON objects, which YAML writes without a translation layer; unknown
// keys are refused so a typo never silently drops a setting.
type Manifest struct {
	Space     string         `yaml:"space" json:"space"`
	Queues    []QueueDecl    `yaml:"queues" json:"queues"`
	Workers   []WorkerDecl   `yaml:"workers" json:"workers"`
	Consumers []ConsumerDecl `yaml:"consumers" json:"consumers"`
	dir       string
	// declaredSpace: the file names its space (else it is "default", or
	// the context's).
	declaredSpace bool
}

// QueueDecl is one AtLeastOnceQueue.
type QueueDecl struct {
	Name                    string `yaml:"name"`
	MessageRetentionSeconds int    `yaml:"messageRetentionSeconds"`
	DeliveryDelaySeconds    *int   `yaml:"deliveryDelaySeconds"`
}

// WorkerDecl is one ModuleWorker and the WorkerVersion built from its
// files on disk.
type WorkerDecl struct {
	Name string `yaml:"name"`
	// Main is the main module's file, relative to the manifest.
	Main string `yaml:"main"`
	// Modules are further module files; each is named by its path relative
	// to the main module's directory.
	Modules []string `yaml:"modules"`
	// Handlers defaults to queue when a consumer names the worker, else
	// fetch.
	Handlers []string          `yaml:"handlers"`
	Vars     map[string]string `yaml:"vars"`
	// Secrets by name: {env: NAME} or {file: path}. Their values reach the
	// host as privateInputs and are never printed.
	Secrets map[string]SecretRef `yaml:"secrets"`
	// Producers maps a binding name to a queue name of this manifest.
	Producers map[string]string `yaml:"producers"`
}

// SecretRef says where a secret's value comes from.
type SecretRef struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// ConsumerDecl is one QueueConsumer, named <queue>-consumer unless Name
// says otherwise.
type ConsumerDecl struct {
	Name                   string `yaml:"name"`
	Queue                  string `yaml:"queue"`
	Worker                 string `yaml:"worker"`
	DeadLetterQueue        string `yaml:"deadLetterQueue"`
	MaxBatchSize           *int   `yaml:"maxBatchSize"`
	MaxBatchTimeoutSeconds *int   `yaml:"maxBatchTimeoutSeconds"`
	MaxConcurrency         *int   `yaml:"maxConcurrency"`
	MaxRetries             *int   `yaml:"maxRetries"`
	RetryDelaySeconds      *int   `yaml:"retryDelaySeconds"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// LoadManifest reads dir/tako.yaml (or the file path given) and checks
// every reference in it, naming the entry and the problem.
func LoadManifest(path string) (*Manifest, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ManifestFile)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m Manifest
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	// Unknown keys and values of the wrong kind, in the manifest's words.
	if errs := checkNode(&doc, reflect.TypeOf(m), ""); len(errs) > 0 {
		return nil, fmt.Errorf("manifest %s: %w", path, errors.Join(errs...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	m.dir = filepath.Dir(path)
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return &m, nil
}

func (m *Manifest) check() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	m.declaredSpace = m.Space != ""
	if m.Space == "" {
		m.Space = "default"
	}
	if !nameRE.MatchString(m.Space) {
		bad("space %q: lowercase letters, digits and '-', at most 63", m.Space)
	}
	queues := map[string]bool{}
	for i, q := range m.Queues {
		if !nameRE.MatchString(q.Name) {
			bad("queues[%d]: name %q: lowercase letters, digits and '-', at most 63", i, q.Name)
		}
		if queues[q.Name] {
			bad("queues[%d]: queue %q is declared twice", i, q.Name)
		}
		queues[q.Name] = true
		if q.MessageRetentionSeconds <= 0 {
			bad("queue %q: messageRetentionSeconds is required (seconds a message is kept)", q.Name)
		}
	}
	workers := map[string]*WorkerDecl{}
	for i := range m.Workers {
		w := &m.Workers[i]
		if !nameRE.MatchString(w.Name) {
			bad("workers[%d]: name %q: lowercase letters, digits and '-', at most 63", i, w.Name)
		}
		if workers[w.Name] != nil {
			bad("workers[%d]: worker %q is declared twice", i, w.Name)
		}
		workers[w.Name] = w
		if w.Main == "" {
			bad("worker %q: main (the main module's file) is required", w.Name)
		}
		for b, q := range w.Producers {
			if !queues[q] {
				bad("worker %q: producer binding %s names queue %q, which the manifest does not declare", w.Name, b, q)
			}
		}
		for s, ref := range w.Secrets {
			if (ref.Env == "") == (ref.File == "") {
				bad("worker %q: secret %s needs exactly one of env or file", w.Name, s)
			}
		}
		for _, h := range w.Handlers {
			if h != "queue" && h != "fetch" {
				bad("worker %q: handler %q is neither queue nor fetch", w.Name, h)
			}
		}
	}
	consumed := map[string]bool{}
	for i := range m.Consumers {
		c := &m.Consumers[i]
		if c.Name == "" {
			c.Name = c.Queue + "-consumer"
		}
		if !queues[c.Queue] {
			bad("consumers[%d]: queue %q is not declared in queues", i, c.Queue)
		}
		if workers[c.Worker] == nil {
			bad("consumers[%d]: worker %q is not declared in workers", i, c.Worker)
		}
		if c.DeadLetterQueue != "" && !queues[c.DeadLetterQueue] {
			bad("consumers[%d]: deadLetterQueue %q is not declared in queues", i, c.DeadLetterQueue)
		}
		if consumed[c.Queue] {
			bad("consumers[%d]: queue %q already has a consumer (a queue has at most one)", i, c.Queue)
		}
		consumed[c.Queue] = true
	}
	for i := range m.Workers {
		w := &m.Workers[i]
		if len(w.Handlers) == 0 {
			w.Handlers = []string{"fetch"}
			for _, c := range m.Consumers {
				if c.Worker == w.Name {
					w.Handlers = []string{"queue"}
				}
			}
		}
		sort.Strings(w.Handlers)
	}
	return errors.Join(errs...)
}

// queueSpec is the AtLeastOnceQueue spec of q.
func queueSpec(q QueueDecl) map[string]any {
	s := map[string]any{"messageRetentionSeconds": q.MessageRetentionSeconds}
	if q.DeliveryDelaySeconds != nil {
		s["deliveryDelaySeconds"] = *q.DeliveryDelaySeconds
	}
	return s
}

// consumerSpec is the QueueConsumer spec of c, references resolved.
func consumerSpec(c ConsumerDecl, queue, worker, dlq string) map[string]any {
	or := func(p *int, d int) int {
		if p != nil {
			return *p
		}
		return d
	}
	s := map[string]any{
		"queue":                  map[string]any{"resourceUid": queue},
		"worker":                 map[string]any{"resourceUid": worker},
		"maxBatchSize":           or(c.MaxBatchSize, 10),
		"maxBatchTimeoutSeconds": or(c.MaxBatchTimeoutSeconds, 1),
		"maxConcurrency":         or(c.MaxConcurrency, 1),
		"maxRetries":             or(c.MaxRetries, 3),
		"retryDelaySeconds":      or(c.RetryDelaySeconds, 0),
	}
	if dlq != "" {
		s["deadLetterQueue"] = map[string]any{"resourceUid": dlq}
	}
	return s
}

// build is a worker's version as it should be: the WorkerVersion spec
// (the worker and queue references resolved), its secrets and the name
// derived from a digest of both, so that the same code, bindings, vars and
// secrets always name the same version.
type build struct {
	Name    string
	Spec    map[string]any
	Secrets map[string]string
}

// versionPrefix is how the names of the versions apply creates begin
// (the worker's name, cut so that the whole name fits 63 characters, and
// "-v"); apply collects the unselected ones with this prefix and a digest.
func versionPrefix(worker string) string {
	if len(worker) > 63-14 {
		worker = worker[:63-14]
	}
	return worker + "-v"
}

var versionNameRE = regexp.MustCompile(`-v[0-9a-f]{12}$`)

func (m *Manifest) buildVersion(w WorkerDecl, workerUID string, queueUID map[string]string) (*build, error) {
	mainPath := filepath.Join(m.dir, w.Main)
	base := filepath.Dir(mainPath)
	files := append([]string{w.Main}, w.Modules...)
	var modules []any
	seen := map[string]bool{}
	for _, f := range files {
		p := filepath.Join(m.dir, f)
		content, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("worker %q: module %s: %w", w.Name, f, err)
		}
		name, err := filepath.Rel(base, p)
		if err != nil || strings.HasPrefix(name, "..") {
			return nil, fmt.Errorf("worker %q: module %s is outside the main module's directory %s", w.Name, f, base)
		}
		name = filepath.ToSlash(name)
		if seen[name] {
			continue
		}
		seen[name] = true
		modules = append(modules, map[string]any{"name": name, "content": string(content)})
	}
	spec := map[string]any{
		"worker":     map[string]any{"resourceUid": workerUID},
		"mainModule": filepath.ToSlash(filepath.Base(mainPath)),
		"modules":    modules,
	}
	var bindings []any
	names := make([]string, 0, len(w.Producers))
	for b := range w.Producers {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		bindings = append(bindings, map[string]any{"name": b, "resource": map[string]any{"resourceUid": queueUID[w.Producers[b]]}})
	}
	if len(bindings) > 0 {
		spec["queueProducerBindings"] = bindings
	}
	if len(w.Vars) > 0 {
		spec["vars"] = w.Vars
	}
	secrets := map[string]string{}
	for s, ref := range w.Secrets {
		if ref.Env != "" {
			v, ok := os.LookupEnv(ref.Env)
			if !ok {
				return nil, fmt.Errorf("worker %q: secret %s: environment variable %s is not set", w.Name, s, ref.Env)
			}
			secrets[s] = v
		} else {
			raw, err := os.ReadFile(filepath.Join(m.dir, ref.File))
			if err != nil {
				return nil, fmt.Errorf("worker %q: secret %s: %w", w.Name, s, err)
			}
			secrets[s] = strings.TrimRight(string(raw), "\r\n")
		}
	}
	// The digest covers everything the version holds, its references by
	// name rather than UID: so a dry run on a fresh space, where no UID
	// exists yet, names the version apply will create. json.Marshal sorts
	// map keys, so it is stable.
	named := map[string]any{}
	for k, v := range spec {
		named[k] = v
	}
	named["worker"] = map[string]any{"name": w.Name}
	if len(bindings) > 0 {
		var nb []any
		for _, b := range names {
			nb = append(nb, map[string]any{"name": b, "queue": w.Producers[b]})
		}
		named["queueProducerBindings"] = nb
	}
	h := sha256.New()
	enc, _ := json.Marshal(named)
	h.Write(enc)
	enc, _ = json.Marshal(secrets)
	h.Write(enc)
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	name := versionPrefix(w.Name) + sum
	b := &build{Name: name, Spec: spec}
	if len(secrets) > 0 {
		b.Secrets = secrets
	}
	return b, nil
}
