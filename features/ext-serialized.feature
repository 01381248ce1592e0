@ext-serialized
Feature: Serialized queues (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Serialized
  queues): intra-mart's serialized task queues. An AtLeastOnceQueue created
  in the offering "serialized" delivers its messages strictly in accept
  order, one batch at a time: a batch is taken only from the head, and only
  when no batch of the queue is in flight; a retried or delayed head blocks
  what is behind it; a head that exhausts its deliveries is dead-lettered
  and the next becomes the head. Every rule of the Forms holds
  (at-least-once, attempts, 1 + maxRetries, dead-letter with a new ID).

  @EXT-SERIAL-14 @EXT-SERIAL-15 @HAPI-ADM-1
  Scenario: a queue is created in the offering serialized, which only the queue Form has
    When I create a queue "sq" in offering "serialized"
    Then the request is accepted
    And the offering of "sq" reads "serialized"
    When I update "sq" with messageRetentionSeconds=120
    Then the request is accepted
    And the offering of "sq" reads "serialized"
    When I create a queue "other" in offering "Serialized"
    Then the request is refused with 422 "unknown_offering"
    And the problem points at "/offering"
    Given a worker "w"
    When I create a consumer "c" of "sq" by "w" in offering "serialized"
    Then the request is refused with 422 "unknown_offering"
    And the listing holds exactly 0 resources named "c"
    And the listing holds exactly 0 resources named "other"

  @EXT-SERIAL-1 @EXT-SERIAL-2 @EXT-SERIAL-9 @EXT-SERIAL-11
  Scenario: one batch at a time, in accept order, whatever maxConcurrency
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxConcurrency=5; maxBatchSize=2
    When "w" sends a batch through "TASKS":
      """
      {"tag":"s1","do":"sleep-ack:300"}
      {"tag":"s2","do":"sleep-ack:300"}
      {"tag":"s3","do":"sleep-ack:300"}
      {"tag":"s4","do":"sleep-ack:300"}
      {"tag":"s5","do":"sleep-ack:300"}
      """
    Then the deliveries from "q" were exactly: s1#1, s2#1, s3#1, s4#1, s5#1
    And messages "s1" and "s2" came in one batch
    And messages "s3" and "s4" came in one batch
    And at most 1 handler for "q" ran at once

  @EXT-SERIAL-1 @EXT-SERIAL-2 @EXT-SERIAL-11
  Scenario: sends that follow one another are delivered in that order, even while batches run
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxConcurrency=3
    When "w" sends {"tag":"o1","do":"sleep-ack:500"} through "TASKS"
    And "w" sends {"tag":"o2","do":"ack"} through "TASKS"
    And "w" sends {"tag":"o3","do":"ack"} through "TASKS"
    And "w" sends {"tag":"o4","do":"ack"} through "TASKS"
    Then the deliveries from "q" were exactly: o1#1, o2#1, o3#1, o4#1
    And at most 1 handler for "q" ran at once

  @EXT-SERIAL-3
  Scenario: a thrown head stays the head and is delivered again before the rest
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=2
    When "w" sends a batch through "TASKS":
      """
      {"tag":"h1","do":["throw","ack"]}
      {"tag":"h2","do":"ack"}
      {"tag":"h3","do":"ack"}
      """
    Then the deliveries from "q" were exactly: h1#1, h1#2, h2#1, h3#1
    And message "h1" is redelivered no sooner than 2 seconds after its first delivery

  @EXT-SERIAL-3
  Scenario: an explicitly retried head, with its own delay, stays the head
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; maxConcurrency=2
    When "w" sends a batch through "TASKS":
      """
      {"tag":"e1","do":["retry:2","retry:1","ack"]}
      {"tag":"e2","do":"ack"}
      """
    Then the deliveries from "q" were exactly: e1#1, e1#2, e1#3, e2#1

  @EXT-SERIAL-3 @EXT-SERIAL-12
  Scenario: a retried batch comes back whole, in order, ahead of the messages behind it
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=3; maxRetries=3; retryDelaySeconds=1
    When "w" sends a batch through "TASKS":
      """
      {"tag":"b1","do":["throw","ack"]}
      {"tag":"b2","do":"none"}
      {"tag":"b3","do":"none"}
      {"tag":"b4","do":"ack"}
      """
    Then the deliveries from "q" were exactly: b1#1, b2#1, b3#1, b1#2, b2#2, b3#2, b4#1

  @EXT-SERIAL-12
  Scenario: what a thrown batch acknowledged stays acknowledged; its retried head is still the head
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=3; maxRetries=3; retryDelaySeconds=1
    When "w" sends a batch through "TASKS":
      """
      {"tag":"a1","do":["throw","ack"]}
      {"tag":"a2","do":"ack"}
      {"tag":"a3","do":"ack"}
      {"tag":"a4","do":"ack"}
      """
    Then the deliveries from "q" were exactly: a1#1, a2#1, a3#1, a1#2, a4#1

  @EXT-SERIAL-6
  Scenario: a delayed send blocks the messages sent after it until it is delivered
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=10
    When "w" sends {"tag":"d1","do":"ack"} through "TASKS" with options {"delaySeconds": 3}
    And "w" sends {"tag":"d2","do":"ack"} through "TASKS"
    And "w" sends {"tag":"d3","do":"ack"} through "TASKS"
    Then message "d2" is not delivered within 2 seconds
    And the deliveries from "q" were exactly: d1#1, d2#1, d3#1
    And message "d1" is first delivered no sooner than 3 seconds after it was sent

  @EXT-SERIAL-4
  Scenario: a head that exhausts its deliveries is dead-lettered, and the next becomes the head
    Given a serialized queue "q"
    And a serialized queue "dlq"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=1; deadLetterQueue=@dlq
    And a consumer "cd" of "dlq" by "w"
    When "w" sends a batch through "TASKS":
      """
      {"tag":"x1","do":"throw"}
      {"tag":"x2","do":"ack"}
      {"tag":"x3","do":"throw"}
      {"tag":"x4","do":"ack"}
      """
    Then the deliveries from "q" were exactly: x1#1, x1#2, x2#1, x3#1, x3#2, x4#1
    And message "x1" arrives in "dlq" as a new message
    And message "x3" arrives in "dlq" as a new message
    And the deliveries from "dlq" were exactly: x1#1, x3#1

  @restart @EXT-SERIAL-7
  Scenario: accept order survives a restart
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends a batch through "TASKS":
      """
      {"tag":"r1","do":"ack"}
      {"tag":"r2","do":"ack"}
      {"tag":"r3","do":"ack"}
      {"tag":"r4","do":"ack"}
      {"tag":"r5","do":"ack"}
      {"tag":"r6","do":"ack"}
      {"tag":"r7","do":"ack"}
      {"tag":"r8","do":"ack"}
      """
    And "w" sends {"tag":"r9","do":"ack"} through "TASKS"
    When the host restarts
    And "w" sends {"tag":"r10","do":"ack"} through "TASKS"
    And a consumer "c" of "q" by "w" with maxBatchSize=3
    Then the deliveries from "q" were exactly: r1#1, r2#1, r3#1, r4#1, r5#1, r6#1, r7#1, r8#1, r9#1, r10#1

  @restart @EXT-SERIAL-7
  Scenario: a restart while the head is being handled: the head is finished or delivered again before the rest
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; maxConcurrency=4
    And "w" sends a batch through "TASKS":
      """
      {"tag":"t1","do":["sleep:6000","ack"]}
      {"tag":"t2","do":"ack"}
      {"tag":"t3","do":"ack"}
      {"tag":"t4","do":"ack"}
      """
    And message "t1" is delivered
    When the host restarts
    Then the deliveries from "q" kept accept order: t1, t2, t3, t4

  @restart @EXT-SERIAL-5
  Scenario: dead-lettered messages keep their order in a serialized dead-letter queue across a restart
    Given a serialized queue "q"
    And a serialized queue "dlq"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    When "w" sends a batch through "TASKS":
      """
      {"tag":"k1","do":"throw"}
      {"tag":"k2","do":"throw"}
      {"tag":"k3","do":"throw"}
      {"tag":"k4","do":"throw"}
      {"tag":"k5","do":"throw"}
      {"tag":"k6","do":"throw"}
      """
    Then the deliveries from "q" were exactly: k1#1, k2#1, k3#1, k4#1, k5#1, k6#1
    And "dlq" eventually observes messageCount 6
    When the host restarts
    And a consumer "cd" of "dlq" by "w" with maxBatchSize=2
    Then the deliveries from "dlq" were exactly: k1#1, k2#1, k3#1, k4#1, k5#1, k6#1

  @EXT-SERIAL-10
  Scenario: a lone head waits for maxBatchTimeoutSeconds, and sends within it share the head's batch
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=3; maxBatchTimeoutSeconds=6
    When "w" sends {"tag":"h1","do":"ack"} through "TASKS"
    And 1 second passes
    And "w" sends {"tag":"h2","do":"ack"} through "TASKS"
    Then message "h1" is first delivered no sooner than 6 seconds after its accept time, on the host's clock
    And messages "h1" and "h2" came in one batch
    When "w" sends a batch through "TASKS":
      """
      {"tag":"f1","do":"ack"}
      {"tag":"f2","do":"ack"}
      {"tag":"f3","do":"ack"}
      """
    Then messages "f1", "f2" and "f3" came in one batch
    And the deliveries from "q" were exactly: h1#1, h2#1, f1#1, f2#1, f3#1

  @ext-pause @EXT-SERIAL-13
  Scenario: a paused serialized queue starts no batch, and resumes from its head
    Given a serialized queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1
    And "q" has been paused
    When "w" sends {"tag":"p1","do":"ack"} through "TASKS"
    And "w" sends {"tag":"p2","do":"ack"} through "TASKS"
    And "w" sends {"tag":"p3","do":"ack"} through "TASKS"
    Then message "p1" is not delivered within 3 seconds
    When I resume "q"
    Then the deliveries from "q" were exactly: p1#1, p2#1, p3#1

  @slow @EXT-SERIAL-13
  Scenario: an expired head is removed and unblocks the message behind it
    Given a serialized queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"head","do":"ack"} through "TASKS" with options {"delaySeconds": 600}
    And "w" sends {"tag":"next","do":"ack"} through "TASKS"
    Then message "next" is not delivered within 55 seconds
    And message "next" is delivered
    And message "head" is not delivered within 3 seconds
