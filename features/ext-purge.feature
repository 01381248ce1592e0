@ext-purge
Feature: Purge (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Purge):
  Cloudflare Queues' purge, SQS PurgeQueue, RabbitMQ's queue purge. POST
  /v2/spaces/{space}/resources/{queue}/purge removes every message of an
  AtLeastOnceQueue as an Operation of kind purge: durable, idempotent with an
  Idempotency-Key, for editors of the queue. Messages held by a running batch
  are not acknowledged by it: their settlement answers as for a message
  removed while in flight, and they are not delivered again.

  @EXT-PURGE-1 @EXT-PURGE-2 @EXT-PURGE-4
  Scenario: a purge removes every message, and the queue goes on accepting
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends 5 messages tagged "p" through "TASKS" in one batch
    And "w" sends {"tag":"later","do":"ack"} through "TASKS" with options {"delaySeconds": 600}
    Then the stats of "q" become 6 messages: 5 available, 1 delayed, 0 retry-waiting, 0 in flight
    When I purge "q"
    Then the response status is 202
    And the purge ends succeeded with progress removed 6
    And the stats of "q" become 0 messages: 0 available, 0 delayed, 0 retry-waiting, 0 in flight
    When "w" sends {"tag":"after","do":"ack"} through "TASKS"
    Then the stats of "q" become 1 message: 1 available, 0 delayed, 0 retry-waiting, 0 in flight
    And "q" holds 1 message tagged "after"

  @EXT-PURGE-5 @EXT-PURGE-12 @EXT-PURGE-6
  Scenario: a message in flight is not acknowledged by a purge, and is not delivered again
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=3
    When "w" sends {"tag":"s","do":"sleep-ack:1500"} through "TASKS"
    And message "s" is delivered
    And I purge "q"
    Then the purge ends succeeded with progress removed 1
    And the settlement results for "s" were:
      | call        | outcome |
      | acknowledge | ok      |
    And message "s" is not delivered again within 3 seconds
    And the stats of "q" become 0 messages: 0 available, 0 delayed, 0 retry-waiting, 0 in flight

  @EXT-PURGE-5
  Scenario: a retry of a purged message in flight does not bring it back
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=3; retryDelaySeconds=0
    When "w" sends {"tag":"r","do":"sleep-retry:1500"} through "TASKS"
    And message "r" is delivered
    And I purge "q"
    Then the purge ends succeeded with progress removed 1
    And the settlement results for "r" were:
      | call  | outcome |
      | retry | ok      |
    And message "r" is not delivered again within 3 seconds

  @EXT-PURGE-7
  Scenario: a purge with the same Idempotency-Key replays its Operation
    Given a queue "q"
    And the next request carries header "Idempotency-Key": purge-once
    When I purge "q"
    Then the response status is 202
    And the purge ends succeeded with progress removed 0
    Given the next request carries header "Idempotency-Key": purge-once
    When I purge "q"
    Then the response replays the previous operation

  @EXT-PURGE-8 @HAPI-AUTH-9
  Scenario: a viewer may not purge, and a principal without a grant on queues neither
    Given a queue "q"
    When I act as the "viewer" principal
    And I POST "/v2/spaces/{{space}}/resources/{{uid:q}}/purge"
    Then the request is refused with 403 "forbidden"
    When I act as the "narrow" principal
    And I POST "/v2/spaces/{{space}}/resources/{{uid:q}}/purge"
    Then the request is refused with 403 "forbidden"

  @EXT-PURGE-9
  Scenario: only a queue is purged
    Given a queue "q"
    And a worker "w"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:w}}/purge"
    Then the request is refused with 404 "not_a_queue"
    When I POST "/v2/spaces/{{space}}/resources/{{nouid}}/purge"
    Then the request is refused with 404 "not_found"

  @restart @EXT-PURGE-4
  Scenario: a purge is durable across a restart, and is not run again by it
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends 4 messages tagged "p" through "TASKS" in one batch
    And I purge "q"
    Then the purge ends succeeded with progress removed 4
    When "w" sends {"tag":"kept","do":"ack"} through "TASKS"
    And the host restarts
    Then the stats of "q" become 1 message: 1 available, 0 delayed, 0 retry-waiting, 0 in flight
    And "q" holds 1 message tagged "kept"
    And the purge ends succeeded with progress removed 4

  @store-faults @EXT-PURGE-11
  Scenario: a purge the store cannot record is backend_unavailable and removes nothing
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends 3 messages tagged "p" through "TASKS" in one batch
    And the host's store fails every write of operations for "q"
    And I purge "q"
    Then the request is refused with 503 "backend_unavailable"
    Given the host's store works again
    Then "q" holds 3 messages tagged "p"
    When I purge "q"
    Then the purge ends succeeded with progress removed 3
