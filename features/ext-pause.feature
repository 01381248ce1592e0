@ext-pause
Feature: Active and inactive delivery (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Active and
  inactive delivery): intra-mart's active/inactive task queues and
  Cloudflare Queues' pause and resume delivery. PUT
  /v2/spaces/{space}/resources/{queue}/delivery {"active": false} pauses an
  AtLeastOnceQueue: sends are still accepted and retention keeps running,
  but no batch starts; batches already running finish. GET of the same
  route on the queue or on its QueueConsumer reads the state. Every rule of
  the Forms holds while a queue is paused; only when a batch starts changes.

  @EXT-PAUSE-2 @EXT-PAUSE-4 @EXT-PAUSE-7 @HAPI-AUTH-9
  Scenario: a paused queue accepts sends and delivers nothing until it is resumed
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "q" has been paused
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then message "m1" is not delivered within 3 seconds
    And the delivery of "q" reads inactive
    And the delivery of "c" reads inactive for "q"
    When I resume "q"
    Then the response status is 200
    And message "m1" is delivered exactly 1 time
    And the delivery of "q" reads active
    And the delivery of "c" reads active for "q"

  @EXT-PAUSE-3
  Scenario: a batch running when the queue is paused finishes and settles
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1
    And "w" sends {"tag":"m1","do":"sleep-ack:2000"} through "TASKS"
    And message "m1" is delivered
    When I pause "q"
    Then the response status is 200
    When "w" sends {"tag":"m2","do":"ack"} through "TASKS"
    Then message "m2" is not delivered within 4 seconds
    When I resume "q"
    Then message "m2" is delivered exactly 1 time
    And message "m1" is not delivered again within 2 seconds

  @EXT-PAUSE-1 @EXT-PAUSE-6
  Scenario: pausing and resuming are idempotent, and a queue starts active
    Given a queue "q"
    Then the delivery of "q" reads active
    When I pause "q"
    Then the response status is 200
    When I pause "q"
    Then the response status is 200
    And the delivery of "q" reads inactive
    When I resume "q"
    Then the response status is 200
    When I resume "q"
    Then the response status is 200
    And the delivery of "q" reads active

  @EXT-PAUSE-12
  Scenario: an update of a paused queue's spec leaves it paused
    Given a queue "q"
    And "q" has been paused
    When I update "q" with messageRetentionSeconds=120
    Then the request is accepted
    And the delivery of "q" reads inactive

  @EXT-PAUSE-8 @HAPI-AUTH-4
  Scenario: a viewer reads the delivery state but cannot change it
    Given a queue "q"
    When I act as the "viewer" principal
    Then the delivery of "q" reads active
    When I pause "q"
    Then the request is refused with 403 "forbidden"

  @EXT-PAUSE-8 @HAPI-AUTH-9
  Scenario: an editor of workers who only views queues cannot pause one
    Given a queue "q"
    When I act as the "sender" principal
    And I pause "q"
    Then the request is refused with 403 "forbidden"
    And the delivery of "q" reads active

  @EXT-PAUSE-9
  Scenario: only a queue has a delivery state to change
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I pause "w"
    Then the request is refused with 404 "not_a_queue"
    When I pause "c"
    Then the request is refused with 409 "not_a_queue"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:w}}/delivery"
    Then the request is refused with 404 "not_a_queue"
    When I GET "/v2/spaces/{{space}}/resources/{{nouid}}/delivery"
    Then the request is refused with 404 "not_found"

  @EXT-PAUSE-5
  Scenario: a malformed delivery request is refused
    Given a queue "q"
    When I PUT "/v2/spaces/{{space}}/resources/{{uid:q}}/delivery" with body:
      """
      {"active": "no"}
      """
    Then the request is refused with 400 "invalid_request"
    When I PUT "/v2/spaces/{{space}}/resources/{{uid:q}}/delivery" with body:
      """
      {"active": false, "until": 5}
      """
    Then the request is refused with 400 "invalid_request"
    And the delivery of "q" reads active

  @restart @EXT-PAUSE-12
  Scenario: a paused queue stays paused across a restart, and resumes afterwards
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "q" has been paused
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    When the host restarts
    Then the delivery of "q" reads inactive
    And message "m1" is not delivered within 3 seconds
    When I resume "q"
    Then message "m1" is delivered exactly 1 time

  @handler-limit @EXT-PAUSE-3 @EXT-PAUSE-14
  Scenario: a message retried by a batch that ran on when the queue was paused waits in the queue
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=3; retryDelaySeconds=3
    And "w" sends {"tag":"r","do":["sleep:600000","ack"]} through "TASKS"
    And message "r" is delivered
    When I pause "q"
    Then the response status is 200
    And message "r" is not delivered again within 8 seconds
    When I resume "q"
    Then message "r" is delivered with attempts 1, 2

  @EXT-PAUSE-13
  Scenario: the delivery state is the queue's: it holds while the consumer is deleted and created again
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "q" has been paused
    And "c" has been deleted
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    When I create a consumer "c2" of "q" by "w"
    Then the request is accepted
    And the delivery of "c2" reads inactive for "q"
    And message "m1" is not delivered within 3 seconds
    When I resume "q"
    Then message "m1" is delivered exactly 1 time

  @EXT-PAUSE-15 @EXT-PAUSE-16
  Scenario: a paused queue's messages are counted, and deleting it deletes it as the Forms say
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And "q" has been paused
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    And "w" sends {"tag":"m2","do":"ack"} through "TASKS"
    Then the messageCount of "q", when observed, becomes 2
    Given "w" has been updated with -version
    And "w-v1" has been deleted
    When I delete "q"
    Then the request is accepted
    And "q" no longer exists
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And the delivery of "q" reads active
    Given a worker "w3"
    And a consumer "c" of "q" by "w3"
    Then message "m1" is not delivered within 3 seconds

  @ext-redrive @EXT-PAUSE-10
  Scenario: while a redrive of a queue is under way its delivery state cannot change
    Given a queue "q"
    And a queue "dlq"
    And a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 30 messages tagged "m" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 2 messages per second
    Then the redrive is running with between 0 and 28 moved of 30
    When I pause "dlq"
    Then the request is refused with 409 "operation_in_progress"
    And the delivery of "dlq" reads active
    When I cancel the redrive
    Then the response status is 200
    When I pause "dlq"
    Then the response status is 200

  @store-faults @EXT-PAUSE-11
  Scenario: a delivery state the store cannot make durable is backend_unavailable and changes nothing
    Given a queue "q"
    And the host's store fails every write of resources for "q"
    When I pause "q"
    Then the request is refused with 503 "backend_unavailable"
    Given the host's store works again
    Then the delivery of "q" reads active
    When I pause "q"
    Then the response status is 200

  @slow @EXT-PAUSE-2 @EXT-PAUSE-14
  Scenario: a paused queue keeps removing messages past messageRetentionSeconds
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "q" has been paused
    And "w" sends {"tag":"old","do":"ack"} through "TASKS"
    And 62 seconds pass
    And "w" sends {"tag":"fresh","do":"ack"} through "TASKS"
    Then the messageCount of "q", when observed, becomes 1
    When I resume "q"
    Then message "fresh" is delivered
    And message "old" is not delivered within 3 seconds
