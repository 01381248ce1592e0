// Package controller is the host's resource controller: admission,
// Operations (intent, effect, resume), the observer and the reconciler,
// version resolution and the rebuild of the engine at start, over a
// registry of Forms. It knows no HTTP: the server (server/) authenticates,
// parses and renders; everything a Form means happens here, and it is
// tested without a listener.
//
// # One file per Form
//
// Everything that differs between Forms is behind the Form interface (its
// URL and schemas, its references, its admission rules, how it applies an
// effect, how it observes, how it is rebuilt on start) and a few optional
// interfaces (what the delivery engine holds of it, which queues a change
// of it reaches), implemented once per Form: form_queue.go
// (AtLeastOnceQueue 0.2.0), form_consumer.go (QueueConsumer 0.3.0),
// form_worker.go (ModuleWorker 0.3.0) and form_version.go (WorkerVersion
// 0.5.0). The generic code, here and in host/, never switches on a Form
// URL: it asks the Registry (IsQueue, IsConsumer, Queues, Consumers,
// QueueConfig, ConsumerConfig). The queue routes (ext_*.go: delivery
// state, inspection, purge, redrive, publish) take a resource of any Form
// that implements EngineQueue.
//
// # Adding a Form
//
//  1. Write its schemas in schemas/ (spec, privateInputs, observed) and
//     register them with the validator.
//  2. Write form_<name>.go: a type implementing Form. References lists the
//     resourceUid members of its spec; admission then checks that they
//     resolve (steps 7 and 8), refuses deleting what they name
//     (dependency_conflict) and re-observes the Form's resources when a
//     referenced one changes. Admit holds the Form's own rules (step 9),
//     against a Space that reads only what it asks for. Apply, Undo,
//     Observe and Rebuild say what the Form does outside the store; a Form
//     with no effect returns nil from each. Optional interfaces, in the
//     same file:
//     - Summarizer: its specs can be large (what a list item shows by
//     default);
//     - Unobserved: its resources have no observation;
//     - EngineQueue: its resources are queues of the delivery engine
//     (QueueConfig); every queue route and host/ then treat them as
//     queues;
//     - EngineConsumer: its resources are consumers of the engine
//     (ConsumerConfig): their delivery state is their queue's, and a
//     change of the code they run needs editor on the queues they read;
//     - QueueAuthority: a create or update of it can change the code that
//     runs on a queue's messages (QueueClaims names the queues).
//  3. Register it in Builtin (registration order is rebuild order: a Form
//     after the Forms it references).
//  4. Write its features in features/.
//
// form_test.go registers two Forms only in tests, each in that test file
// alone: noteForm goes through admission, Operations and observation, and
// tubeForm, a second queue Form, is a queue on every queue route.
//
// # Why admission is one ordered pass under the space's lock
//
// The Forms require that a refused request changes nothing: no resource,
// no Operation, no idempotency key. So every check of spec/host-api.md
// §Admission runs, in the documented order, before the first Apply, and the
// first Apply is the only thing that makes a request "accepted". Checks that
// look at other resources (names, the one-consumer-per-queue rule, the
// dead-letter graph, dependencies) are only sound if nothing changes
// between the check and that Apply, so the admissions of a space run one
// at a time under the space's lock, and each reserves in memory what it
// will write before releasing it (pending.go): the next admission is
// checked against the reservation while the first Apply waits for the
// journal, so admissions of one space share its syncs. References never
// cross spaces, so unrelated spaces admit in parallel. Every
// read-modify-write of a resource record holds that record's lock. Effects
// outside the store (engine calls, which can block while handlers finish)
// run without any lock. Admission reads only what it checks (the name, the
// referenced resources, the referrers from an index of references, a
// count): its cost does not grow with the unrelated resources of a space.
//
// # Why the resource record is written with the intent
//
// The first Apply journals the Operation (running, with its intent: the
// desired record) together with the resource in its transitional state
// (creating, updating, deleting). Other admissions therefore see in-flight
// work as ordinary records: a second create of the name, a second consumer
// on the queue, a reference to a queue being deleted are all refused by the
// same checks that refuse them afterwards, and nothing is created twice
// while an outcome is unknown. The effect then runs, and the outcome (the
// final record and the terminal Operation) is one more Apply.
//
// # Why recovery can settle by observation
//
// The delivery engine keeps its queues and consumers in memory and is
// rebuilt from the records at start (Form.Rebuild), so after a restart the
// host's state outside the journal is exactly what rebuild put there. An
// Operation with an intent is then settled by re-driving the (idempotent)
// effect (Form.Apply); when the engine cannot answer, the Operation stays
// reconciling with effect unknown and the background reconciler tries
// again. It is never reported none on a restart alone.
package controller
