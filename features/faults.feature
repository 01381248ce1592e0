@store-faults
Feature: Backend failures and unknown outcomes
  These scenarios make the host's store fail on command through the
  fault-control contract (features/README.md §host-control, --fault-cmd):
  "fails" writes apply nothing and report a backend failure; "loses the
  outcome" writes are applied and reported failed anyway, so that the host
  cannot know. Every fault is scoped to the scenario's space or resources
  and cleared when the scenario ends.

  @AtLeastOnceQueue-0.2.0 @producer-binding @Q-OPS-23 @Q-BIND-13
  Scenario: a send while the store fails rejects backend_unavailable and accepts nothing
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And the host's store fails every write of sends for "q"
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"lost1\",\"do\":\"ack\"}"}}
      """
    Then the call rejects with "backend_unavailable"
    When "w" calls "TASKS" with:
      """
      {"op": "sendBatch", "messages": [{"body": {"string": "{\"tag\":\"lost2\",\"do\":\"ack\"}"}}, {"body": {"string": "{\"tag\":\"lost3\",\"do\":\"ack\"}"}}]}
      """
    Then the call rejects with "backend_unavailable"
    When the host's store works again
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then the messageCount of "q", when observed, becomes 1
    When a consumer "c" of "q" by "w"
    Then message "m1" is delivered exactly 1 time
    And message "lost1" is not delivered within 2 seconds
    And message "lost2" is not delivered within 1 second
    And message "lost3" is not delivered within 1 second

  @QueueConsumer-0.3.0 @settlement @QC-DELIV-16 @QC-CRUD-12 @QC-CRUD-15
  Scenario: an acknowledgement while the store fails rejects backend_unavailable; the message stays unsettled and is delivered again
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=2
    And the host's store fails every write of settlements for "q"
    When "w" sends {"tag":"m1","do":["ack-then-throw","ack"]} through "TASKS"
    Then the settlement results of delivery 1 for "m1" were:
      | call        | outcome             |
      | acknowledge | backend_unavailable |
    When the host's store works again
    Then message "m1" is delivered with attempts 1, 2
    And every delivery of "m1" carries its send ID and accept time

  @QueueConsumer-0.3.0 @settlement @QC-CRUD-12 @QC-CRUD-15 @QC-CRUD-16
  Scenario: when the acknowledgement of a returning handler cannot be stored, the message is delivered again
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=1
    And the host's store fails the next write of settlements for "q"
    When "w" sends {"tag":"m1","do":"none"} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2

  @QueueConsumer-0.3.0 @settlement @QC-CRUD-14 @QC-CRUD-15
  Scenario: an acknowledgement whose outcome is unknown is not reported done, and the message is neither lost nor stuck
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=1
    And the host's store loses the outcome of the next write of settlements for "q"
    When "w" sends {"tag":"m1","do":["ack-then-throw","ack"]} through "TASKS"
    Then the settlement results of delivery 1 for "m1" were:
      | call        | outcome             |
      | acknowledge | backend_unavailable |
    And message "m1" is delivered again, or "q" observes messageCount 0

  @AtLeastOnceQueue-0.2.0 @operations @operation-in-progress @Q-OPS-21 @Q-OPS-23 @Q-OPS-24 @Q-OPS-27 @Q-OPS-4
  Scenario: a queue deletion the store cannot complete stays reconciling/unknown, allows no second queue of its name, and converges
    Given a queue "q"
    And the host's store fails every write of message-deletion for "q"
    When I request the deletion of "q"
    Then the remembered operation becomes reconciling with effect unknown
    And the remembered operation stays reconciling with effect unknown for 2 seconds
    When I create a queue "q" with spec {"messageRetentionSeconds": 600}
    Then the request is refused with 409 "operation_in_progress"
    When I update "q" with messageRetentionSeconds=120
    Then the request is refused with 409 "operation_in_progress"
    When I delete "q"
    Then the request is refused with 409 "operation_in_progress"
    And the listing holds exactly 1 resource named "q"
    When the host's store works again
    Then the remembered operation converges to succeeded with effect applied, never read failed or none
    And "q" no longer exists
    When I create a queue "q" with spec {"messageRetentionSeconds": 600}
    Then the request is accepted
    And the listing holds exactly 1 resource named "q"

  @AtLeastOnceQueue-0.2.0 @operations @Q-OPS-21 @Q-OPS-24 @Q-OPS-25
  Scenario: a queue deletion whose message removal has an unknown outcome is reconciled, never reported none
    Given a queue "q"
    And the host's store loses the outcome of the next write of message-deletion for "q"
    When I request the deletion of "q"
    Then the remembered operation ends succeeded with effect applied, never read failed or none
    And "q" no longer exists

  @AtLeastOnceQueue-0.2.0 @QueueConsumer-0.3.0 @restart @operations @Q-OPS-25 @QC-CRUD-19 @QC-CRUD-20 @QC-CRUD-21
  Scenario: a restart while an outcome is unknown does not turn it into none
    Given a queue "q"
    And the host's store fails every write of message-deletion for "q"
    When I request the deletion of "q"
    Then the remembered operation becomes reconciling with effect unknown
    When the host restarts
    Then the remembered operation stays reconciling with effect unknown for 2 seconds
    When the host's store works again
    Then the remembered operation converges to succeeded with effect applied, never read failed or none
    And "q" no longer exists

  @QueueConsumer-0.3.0 @operations @QC-CRUD-8 @QC-CRUD-20 @QC-CRUD-21
  Scenario: a consumer create whose outcome cannot be recorded at once converges to one attachment
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And the host's store fails write 2 of operations in this space
    When I create a consumer "c" of "q" by "w"
    Then the request is accepted
    When I create a consumer "c2" of "q" by "w"
    Then the request is refused with 409 "consumer_conflict"
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then message "m1" is delivered exactly 1 time

  @QueueConsumer-0.3.0 @operations @QC-CRUD-8 @QC-CRUD-21
  Scenario: a consumer create whose outcome was recorded but reported lost is reconciled: one attachment, and it takes updates
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And the host's store loses the outcome of write 2 of operations in this space
    When I create a consumer "c" of "q" by "w"
    Then the request is accepted
    When I create a consumer "c2" of "q" by "w"
    Then the request is refused with 409 "consumer_conflict"
    When I update "c" with maxRetries=1
    Then the request is accepted
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then message "m1" is delivered exactly 1 time

  @AtLeastOnceQueue-0.2.0 @operations @Q-OPS-12 @Q-OPS-23 @Q-OPS-26
  Scenario: an update and a delete refused backend_unavailable change nothing; an explicit PUT and DELETE to the same UID converge
    Given a queue "q"
    And the host's store fails every write of operations for "q"
    When I update "q" with messageRetentionSeconds=120
    Then the request is refused with 503 "backend_unavailable"
    And "q" is at generation 1
    And the spec of "q" reads {"messageRetentionSeconds": 600}
    When I delete "q"
    Then the request is refused with 503 "backend_unavailable"
    And "q" still exists
    When the host's store works again
    And I update "q" with messageRetentionSeconds=120
    Then the request is accepted
    And "q" is at generation 2
    When I delete "q"
    Then the request is accepted
    And "q" no longer exists

  @QueueConsumer-0.3.0 @operations @QC-CRUD-22
  Scenario: a consumer update refused backend_unavailable is converged by an explicit PUT to the same UID
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And the host's store fails every write of operations for "c"
    When I update "c" with maxRetries=2
    Then the request is refused with 503 "backend_unavailable"
    And "c" is at generation 1
    When the host's store works again
    And I update "c" with maxRetries=2
    Then the request is accepted
    And "c" is at generation 2
    When I delete "c"
    Then the request is accepted
    And "c" no longer exists

  @AtLeastOnceQueue-0.2.0 @operations @Q-OPS-12 @Q-OPS-26
  Scenario: an update whose first write has an unknown outcome is not left half-done: a later PUT to the same UID wins
    Given a queue "q"
    And the host's store loses the outcome of the next write of operations for "q"
    When I update "q" with messageRetentionSeconds=120
    Then the request is accepted, or refused with 503 "backend_unavailable"
    When I update "q" with messageRetentionSeconds=180
    Then the request is accepted
    And the spec of "q" reads {"messageRetentionSeconds": 180}
    And "q" reads state "active"
