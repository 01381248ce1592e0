// Package server is the Host API v2 behind the generated strict interface
// (gen/api): admission, Operations, idempotency, observation and recovery.
//
// # Why admission is one ordered pass under one lock
//
// The Forms require that a refused request changes nothing: no resource, no
// Operation, no idempotency key. So every check of spec/host-api.md
// §Admission runs, in the documented order, before the first Apply, and the
// first Apply is the only thing that makes a request "accepted". Checks that
// look at other resources (names, the one-consumer-per-queue rule, the
// dead-letter graph, dependencies) are only sound if nothing changes
// between the check and that Apply, so admission and every read-modify-write
// of a resource record hold Server.mu. Effects outside the store (engine
// calls, which can block while handlers finish) run without it.
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
// rebuilt from the records at start, so after a restart the host's state
// outside the journal is exactly what rebuild put there. An Operation with
// an intent is then settled by comparing the intent with the record and
// the engine and re-driving the (idempotent) effect; when the engine cannot
// answer, the Operation stays reconciling with effect unknown and the
// background reconciler tries again. It is never reported none on a restart
// alone.
package server
