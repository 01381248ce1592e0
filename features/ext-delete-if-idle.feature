@ext-delete-if-idle
Feature: Conditional delete of a queue (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Conditional
  delete): intra-mart refuses to remove a task queue while a task runs or
  messages remain. DELETE of an AtLeastOnceQueue with ?ifIdle=true is
  refused with queue_not_idle 409 while the queue holds a message or runs a
  batch; without it, the Forms' delete (which deletes the messages with the
  queue) is unchanged.

  @EXT-IDLE-1
  Scenario: a queue holding a message is not deleted with ifIdle
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}?ifIdle=true"
    Then the request is refused with 409 "queue_not_idle"
    And "q" reads state "active"

  @EXT-IDLE-1
  Scenario: an empty queue is deleted with ifIdle
    Given a queue "q"
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}?ifIdle=true"
    Then the response status is 202

  @EXT-IDLE-4
  Scenario: ifIdle applies to queues only
    Given a worker "w"
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:w}}?ifIdle=true"
    Then the request is refused with 400 "invalid_request"

  @EXT-IDLE-3
  Scenario: a queue whose messages were all acknowledged is idle again, and the Forms' rules still apply
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    And message "m1" is delivered exactly 1 time
    And the messageCount of "q", when observed, becomes 0
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}?ifIdle=true"
    Then the request is refused with 409 "dependency_conflict"

  @EXT-IDLE-1 @EXT-IDLE-2
  Scenario: a queue whose batch still runs is not idle, though every message of the batch is settled
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1
    Then "w" sends through "TASKS" messages its handler acknowledges and then keeps the batch running; a delete of "q" with ifIdle while it runs is refused with 409 "queue_not_idle"
    And "q" reads state "active"

  @EXT-IDLE-5
  Scenario: an Idempotency-Key replays a delete with ifIdle, and is reused without it
    Given a queue "q"
    And the next request carries header "Idempotency-Key": idle-once
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}?ifIdle=true"
    Then the response status is 202
    Given the next request carries header "Idempotency-Key": idle-once
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}?ifIdle=true"
    Then the response replays the previous operation
    Given the next request carries header "Idempotency-Key": idle-once
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 422 "idempotency_key_reuse"
