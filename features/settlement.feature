@QueueConsumer-0.3.0 @settlement
Feature: Settlement methods and the handler's outcome

  Background:
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=1

  @QC-DELIV-16 @QC-DELIV-20 @QC-DELIV-23
  Scenario: acknowledge settles a message; a second settlement is already_settled and nothing is reversed
    When "w" sends {"tag":"m1","do":"ack-then-retry"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome         |
      | acknowledge | ok              |
      | retry       | already_settled |
      | acknowledge | already_settled |
    And message "m1" is delivered exactly 1 time

  @QC-DELIV-17 @QC-DELIV-21 @QC-DELIV-23
  Scenario: retry returns a message for redelivery; acknowledging it afterwards is already_settled
    When "w" sends {"tag":"m1","do":["retry-then-ack","ack"]} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome         |
      | retry       | ok              |
      | acknowledge | already_settled |
      | retry       | already_settled |
    And message "m1" is delivered with attempts 1, 2

  @QC-DELIV-16 @QC-DELIV-17 @QC-DELIV-23 @QC-DELIV-24
  Scenario: an ID that is not in the batch is unknown_message
    When "w" sends {"tag":"m1","do":"foreign-id"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome         |
      | acknowledge | unknown_message |
      | retry       | unknown_message |
    And message "m1" is delivered exactly 1 time

  @QC-DELIV-18 @QC-DELIV-22 @QC-DELIV-23
  Scenario: acknowledgeAll settles every unsettled message
    When "w" sends {"tag":"m1","do":"ackall"} through "TASKS"
    Then the settlement results for "m1" were:
      | call           | outcome         |
      | acknowledgeAll | ok              |
      | acknowledge    | already_settled |
      | retry          | already_settled |
      | acknowledgeAll | ok              |
    And message "m1" is delivered exactly 1 time

  @QC-DELIV-17 @QC-DELIV-18 @QC-DELIV-22 @QC-DELIV-23
  Scenario: acknowledgeAll after a retry in the same batch does not reverse the retry
    When "w" sends {"tag":"m1","do":["retry-then-ackall","ack"]} through "TASKS"
    Then the settlement results of delivery 1 for "m1" were:
      | call           | outcome |
      | retry          | ok      |
      | acknowledgeAll | ok      |
    And message "m1" is delivered with attempts 1, 2

  @QC-DELIV-16 @QC-DELIV-19 @QC-DELIV-22 @QC-DELIV-23
  Scenario: retryAll after an acknowledgement in the same batch does not reverse the acknowledgement
    When "w" sends {"tag":"m1","do":"ack-then-retryall"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome |
      | acknowledge | ok      |
      | retryAll    | ok      |
    And message "m1" is delivered exactly 1 time

  @QC-DELIV-18 @QC-DELIV-19 @QC-DELIV-22 @QC-DELIV-23 @ABI-SETTLE-3
  Scenario: acknowledgeAll after a retryAll in the same batch finds nothing to reverse
    When "w" sends {"tag":"m1","do":["retryall-then-ackall","ack"]} through "TASKS"
    Then the settlement results of delivery 1 for "m1" were:
      | call           | outcome |
      | retryAll       | ok      |
      | acknowledgeAll | ok      |
    And message "m1" is delivered with attempts 1, 2

  @QC-DELIV-18 @QC-DELIV-19 @QC-DELIV-22 @QC-DELIV-23 @ABI-SETTLE-3
  Scenario: retryAll after an acknowledgeAll in the same batch finds nothing to reverse
    When "w" sends {"tag":"m1","do":"ackall-then-retryall"} through "TASKS"
    Then the settlement results for "m1" were:
      | call           | outcome |
      | acknowledgeAll | ok      |
      | retryAll       | ok      |
    And message "m1" is delivered exactly 1 time

  @QC-DELIV-19 @QC-DELIV-22
  Scenario: retryAll returns every unsettled message for redelivery
    When "w" sends {"tag":"m1","do":["retryall","ack"]} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome         |
      | retryAll    | ok              |
      | acknowledge | already_settled |
    And message "m1" is delivered with attempts 1, 2

  @QC-DELIV-15 @QC-DELIV-16 @QC-DELIV-17 @QC-DELIV-18 @QC-DELIV-19 @QC-DELIV-24
  # The kept batch lives in the worker's module state, so "s" must run where
  # "k" ran: it is delayed a second so that the fetch invocation that sends
  # it has ended and the worker is idle again when it is delivered (a host
  # reuses an idle worker's runtime, spec/runtime-abi.md §Global surface).
  Scenario: after the handler returned, every method of its batch is unknown_batch
    When "w" sends {"tag":"k","do":"keep"} through "TASKS"
    And message "k" is delivered exactly 1 time
    And "w" sends {"tag":"s","do":"stale"} through "TASKS" with options {"delaySeconds": 1}
    Then the settlement results for "s" were:
      | call           | outcome       |
      | acknowledge    | unknown_batch |
      | retry          | unknown_batch |
      | acknowledgeAll | unknown_batch |
      | retryAll       | unknown_batch |
    And message "k" is not delivered again within 1 second

  @QC-DELIV-16 @QC-DELIV-26
  Scenario: after the handler threw, every method of its batch is unknown_batch
    When "w" sends {"tag":"k","do":["keep-then-throw","ack"]} through "TASKS"
    And message "k" is delivered with attempts 1, 2
    And "w" sends {"tag":"s","do":"stale"} through "TASKS" with options {"delaySeconds": 1}
    Then the settlement results for "s" were:
      | call           | outcome       |
      | acknowledge    | unknown_batch |
      | retry          | unknown_batch |
      | acknowledgeAll | unknown_batch |
      | retryAll       | unknown_batch |

  @QC-DELIV-25 @QC-CRUD-12
  Scenario: a handler that returns acknowledges what it left unsettled
    When "w" sends {"tag":"m1","do":"none"} through "TASKS"
    Then message "m1" is delivered exactly 1 time

  @QC-DELIV-26 @QC-CRUD-12 @QC-CRUD-17
  Scenario: a handler that rejects retries what it left unsettled
    When "w" sends {"tag":"m1","do":["throw","ack"]} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2

  @QC-DELIV-26
  Scenario: a handler that throws synchronously retries what it left unsettled
    When "w" sends {"tag":"m1","do":["throw-sync","ack"]} through "TASKS"
    Then message "m1" is delivered with attempts 2

  @QC-DELIV-26 @QC-DELIV-23
  Scenario: a handler that throws keeps the acknowledgements it made
    When "w" sends {"tag":"m1","do":"ack-then-throw"} through "TASKS"
    Then message "m1" is delivered exactly 1 time

  @QC-DELIV-26 @QC-DELIV-23
  Scenario: a handler that throws keeps an acknowledgeAll
    When "w" sends {"tag":"m1","do":"ackall-then-throw"} through "TASKS"
    Then message "m1" is delivered exactly 1 time

  @QC-DELIV-26
  Scenario: in one batch, a throw keeps the settled message and retries the unsettled one
    Given a queue "q2"
    And a worker "w2" with producer binding T2 to "q2"
    And a consumer "c2" of "q2" by "w2" with maxBatchSize=2; maxBatchTimeoutSeconds=2; maxRetries=1
    When "w2" sends a batch through "T2":
      """
      {"tag":"settled","do":"ack"}
      {"tag":"unsettled","do":["throw","ack"]}
      """
    Then message "unsettled" is delivered with attempts 1, 2
    And message "settled" is delivered exactly 1 time

  @ABI-SETTLE-1
  Scenario: settlement methods taken off the batch still settle its messages
    When "w" sends {"tag":"m1","do":"ack-detached"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome         |
      | acknowledge | ok              |
      | retry       | already_settled |
    And message "m1" is not delivered again within 2 seconds

  @ABI-SETTLE-2
  Scenario Outline: a settlement argument of the wrong type or range rejects with a TypeError or RangeError and settles nothing
    When "w" sends {"tag":"m1","do":"<directive>"} through "TASKS"
    Then the settlement results for "m1" were:
      | call   | outcome   |
      | <call> | <outcome> |
    And message "m1" is delivered exactly 1 time

    Examples:
      | directive   | call  | outcome    |
      | retry:43201 | retry | RangeError |
      | retry:-1    | retry | RangeError |
      | retry:1.5   | retry | RangeError |

  @ABI-SETTLE-2
  Scenario: a retryAll delay out of range rejects with a RangeError and settles nothing
    When "w" sends {"tag":"m1","do":"retryall:43201"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome    |
      | retryAll    | RangeError |
      | acknowledge | ok         |
    And message "m1" is delivered exactly 1 time

  @ABI-SETTLE-2
  Scenario: a message ID that is not a string rejects with a TypeError and settles nothing
    When "w" sends {"tag":"m1","do":"ack-nonstring"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome   |
      | acknowledge | TypeError |
      | retry       | TypeError |
    And message "m1" is delivered exactly 1 time

  @ABI-SETTLE-4
  Scenario: a message has no settlement methods of its own
    When "w" sends {"tag":"m1","do":"message-ack"} through "TASKS"
    Then the settlement results for "m1" were:
      | call          | outcome   |
      | message.ack   | TypeError |
      | message.retry | TypeError |
    And message "m1" is delivered exactly 1 time
