@ext-redrive
Feature: Redrive (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Redrive): SQS's
  dead-letter queue redrive (StartMessageMoveTask). POST
  /v2/spaces/{space}/resources/{dlq}/redrive moves the messages a queue held
  when the redrive started back to the queue each was dead-lettered from (its
  dead-letter metadata), or to targetQueue, as new messages: new ID, accepted
  now, no attempts. It is an Operation of kind redrive that reports its
  progress (total, moved, skipped), moves at most maxMessagesPerSecond, and
  can be cancelled with POST /v2/spaces/{space}/operations/{id}/cancel. Each
  message moves in one atomic write: it is never lost and never duplicated by
  the move.

  Background:
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"

  @EXT-REDRIVE-1 @EXT-REDRIVE-3 @EXT-REDRIVE-6 @EXT-REDRIVE-7
  Scenario: dead-lettered messages go back to the queue they came from, as new messages
    Given a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    When "w" sends {"tag":"r1","do":"throw"} through "TASKS"
    And "w" sends {"tag":"r2","do":"throw"} through "TASKS"
    Then "dlq" holds 2 messages tagged "r"
    Given "c" has been deleted
    When I redrive "dlq"
    Then the response status is 202
    And the redrive ends succeeded with progress moved 2, skipped 0, total 2
    And "q" holds 2 messages tagged "r"
    And "dlq" holds 0 messages tagged "r"
    And the listed message of "q" tagged "r1" is in state "available" with attempts 0
    And the listed message of "q" tagged "r1" has no dead-letter metadata

  @EXT-REDRIVE-3 @EXT-REDRIVE-4 @EXT-REDRIVE-6
  Scenario: a message that did not arrive by dead-lettering stays, unless a target is given
    Given a worker "w2" with producer binding DLQ to "dlq"
    And a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    And a queue "other"
    When "w" sends {"tag":"dead","do":"throw"} through "TASKS"
    Then "dlq" holds 1 message tagged "dead"
    Given "c" has been deleted
    When "w2" sends {"tag":"direct","do":"ack"} through "DLQ"
    And I redrive "dlq"
    Then the redrive ends succeeded with progress moved 1, skipped 1, total 2
    And "q" holds 1 message tagged "dead"
    And "dlq" holds 1 message tagged "direct"
    When I redrive "dlq" to "other"
    Then the redrive ends succeeded with progress moved 1, skipped 0, total 1
    And "other" holds 1 message tagged "direct"
    And "dlq" holds 0 messages tagged "direct"

  @EXT-REDRIVE-5 @EXT-REDRIVE-9 @EXT-REDRIVE-11 @EXT-REDRIVE-12 @HAPI-OPS-3
  Scenario: a redrive is rate-limited, reports progress and can be cancelled; no message is lost or duplicated
    Given a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 30 messages tagged "m" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 4 messages per second
    Then the response status is 202
    And the redrive is running with between 2 and 12 moved of 30
    When I cancel the redrive
    Then the response status is 200
    And the redrive ends failed with "operation_cancelled" with progress total 30
    And "q" holds as many messages tagged "m" as the redrive moved, 2 seconds later
    And "q" and "dlq" hold 30 messages tagged "m" between them, each once
    When I cancel the redrive
    Then the request is refused with 409 "operation_not_cancellable"

  @EXT-REDRIVE-15 @HAPI-IDEM-4
  Scenario: a redrive with the same Idempotency-Key replays its Operation
    Given the next request carries header "Idempotency-Key": redrive-once
    When I redrive "dlq"
    Then the response status is 202
    And the redrive ends succeeded with progress moved 0, total 0
    Given the next request carries header "Idempotency-Key": redrive-once
    When I redrive "dlq"
    Then the response replays the previous operation

  @EXT-REDRIVE-13 @HAPI-AUTH-9
  Scenario: a viewer may not redrive
    When I act as the "viewer" principal
    And I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {}
      """
    Then the request is refused with 403 "forbidden"

  @EXT-REDRIVE-12 @EXT-REDRIVE-13 @EXT-REDRIVE-14
  Scenario: a bad redrive is refused and changes nothing
    When I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {"targetQueue": {"resourceUid": "{{uid:w}}"}}
      """
    Then the request is refused with 422 "invalid_reference"
    And the problem points at "/targetQueue/resourceUid"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {"targetQueue": {"resourceUid": "{{uid:dlq}}"}}
      """
    Then the request is refused with 422 "invalid_reference"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {"maxMessagesPerSecond": 0}
      """
    Then the request is refused with 400 "invalid_request"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {"speed": 5}
      """
    Then the request is refused with 400 "invalid_request"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:w}}/redrive" with body:
      """
      {}
      """
    Then the request is refused with 404 "not_a_queue"
    When I purge "q"
    And I cancel the redrive
    Then the request is refused with 409 "operation_not_cancellable"

  @restart @EXT-REDRIVE-9 @EXT-REDRIVE-10
  Scenario: a redrive under way when the host restarts goes on afterwards, moving each message once
    Given a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 20 messages tagged "x" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 4 messages per second
    Then the redrive is running with between 2 and 16 moved of 20
    When the host restarts
    Then the redrive ends succeeded with progress moved 20, total 20
    And "q" and "dlq" hold 20 messages tagged "x" between them, each once
    And "q" holds 20 messages tagged "x"

  @EXT-REDRIVE-2 @EXT-REDRIVE-4
  Scenario: a moved message is accepted at the move, with a new ID, no attempts and the target's deliveryDelaySeconds
    Given a queue "slow" with spec {"messageRetentionSeconds": 600, "deliveryDelaySeconds": 7}
    And a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends {"tag":"m","do":"ack"} through "DLQ"
    And I remember the listed message of "dlq" tagged "m"
    And 2 seconds pass
    And I redrive "dlq" to "slow"
    Then the redrive ends succeeded with progress moved 1, skipped 0, total 1
    And the listed message of "slow" tagged "m" is a new message, accepted no sooner than 2 seconds after the remembered one and visible 7 seconds after that
    And the listed message of "slow" tagged "m" is in state "delayed" with attempts 0

  @EXT-REDRIVE-1 @EXT-REDRIVE-6
  Scenario: a redrive moves only the messages the queue held when it started
    Given a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 12 messages tagged "a" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 2 messages per second
    Then the redrive is running with between 0 and 10 moved of 12
    When "w2" sends 3 messages tagged "b" through "DLQ" in one batch
    Then the redrive ends succeeded with progress moved 12, skipped 0, total 12
    And "q" holds 12 messages tagged "a"
    And "dlq" holds 3 messages tagged "b"
    And "q" holds 0 messages tagged "b"

  @handler-limit @EXT-REDRIVE-8
  Scenario: a message held by a batch is skipped, not waited for
    Given a worker "w2" with producer binding DLQ to "dlq"
    And a consumer "cd" of "dlq" by "w2" with maxBatchSize=1; maxRetries=3; retryDelaySeconds=600
    Then a redrive of "dlq" to "q" while a batch holds a message "w2" sent through "DLQ" skips that message without waiting for the batch

  @EXT-REDRIVE-16
  Scenario: a target deleted while a redrive runs ends it failed with invalid_reference
    Given a queue "t"
    And a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 30 messages tagged "m" through "DLQ" in one batch
    And I redrive "dlq" to "t" at 2 messages per second
    Then the redrive is running with between 0 and 28 moved of 30
    When I delete "t"
    Then the request is accepted
    And the redrive ends failed with "invalid_reference" with progress total 30
    And "dlq" holds as many messages tagged "m" as the redrive left unmoved

  @EXT-REDRIVE-17
  Scenario: a moved message is a new message of its target: delivered from attempts 1 and dead-lettered again
    Given a queue "dlq2"
    And a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    When "w" sends {"tag":"again","do":"throw"} through "TASKS"
    Then "dlq" holds 1 message tagged "again"
    Given "c" has been deleted
    When I redrive "dlq"
    Then the redrive ends succeeded with progress moved 1, skipped 0, total 1
    Given a consumer "c2" of "q" by "w" with maxRetries=1; deadLetterQueue=@dlq2
    Then message "again" is delivered from "q" with attempts 1, 1, 2
    And "dlq2" holds 1 message tagged "again"
    And the listed message of "dlq2" tagged "again" was dead-lettered from "q" by "c2" after 2 attempts, reason "retries_exhausted"

  @EXT-REDRIVE-11 @EXT-REDRIVE-15 @EXT-PURGE-10 @HAPI-AUTH-9
  Scenario: while a redrive runs the queue takes no other Operation, and only an editor of queues cancels it
    Given a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 30 messages tagged "m" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 2 messages per second
    Then the redrive is running with between 0 and 28 moved of 30
    When I purge "dlq"
    Then the request is refused with 409 "operation_in_progress"
    When I redrive "dlq" to "q"
    Then the request is refused with 409 "operation_in_progress"
    When I act as the "viewer" principal
    And I cancel the redrive
    Then the request is refused with 403 "forbidden"
    When I act as the "sender" principal
    And I cancel the redrive
    Then the request is refused with 403 "forbidden"
    When I act as the "admin" principal
    Then the redrive is running with between 0 and 29 moved of 30
    When I cancel the redrive
    Then the response status is 200
    And the redrive ends failed with "operation_cancelled" with progress total 30
    And "q" and "dlq" hold 30 messages tagged "m" between them, each once

  @EXT-REDRIVE-5 @EXT-REDRIVE-12 @HAPI-OPS-7
  Scenario: a rate above 1000 is refused; only a redrive is cancelled, and only through its own space
    When I POST "/v2/spaces/{{space}}/resources/{{uid:dlq}}/redrive" with body:
      """
      {"maxMessagesPerSecond": 1001}
      """
    Then the request is refused with 400 "invalid_request"
    When I create a queue "fresh" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And I remember the operation
    When I cancel the remembered operation through the path of this space "{{space}}"
    Then the request is refused with 409 "operation_not_cancellable"
    Given a worker "w2" with producer binding DLQ to "dlq"
    When "w2" sends 20 messages tagged "m" through "DLQ" in one batch
    And I redrive "dlq" to "q" at 2 messages per second
    Then the redrive is running with between 0 and 18 moved of 20
    When I cancel the redrive through the path of another space "{{space2}}"
    Then the request is refused with 404 "not_found"
    When I cancel the redrive through the path of this space "{{space}}"
    Then the response status is 200
    And the redrive ends failed with "operation_cancelled" with progress total 20
