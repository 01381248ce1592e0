@restart
Feature: Restart recovery
  These scenarios restart the host (see the host-control contract in
  features/README.md); they run alone.

  @AtLeastOnceQueue-0.2.0 @Q-OPS-20 @QC-CRUD-13 @QC-CRUD-15
  Scenario: accepted messages survive a restart and are delivered afterwards
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    When the host restarts
    And a consumer "c" of "q" by "w"
    Then message "m1" is delivered exactly 1 time
    And every delivery of "m1" carries its send ID and accept time

  @QueueConsumer-0.3.0 @QC-CRUD-13 @QC-CRUD-16
  Scenario: an acknowledged message is not redelivered after a restart
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    And message "m1" is delivered exactly 1 time
    When the host restarts
    Then message "m1" is not delivered again within 4 seconds

  @QueueConsumer-0.3.0 @QC-CRUD-12 @QC-CRUD-13 @QC-CRUD-16 @Q-MSG-8
  Scenario: a retried message keeps its attempts across a restart
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=3
    And "w" sends {"tag":"m1","do":["retry","ack"]} through "TASKS"
    And message "m1" is delivered
    When the host restarts
    Then message "m1" is delivered with attempts 1, 2
    And every delivery of "m1" carries its send ID and accept time

  @HostAPI-v2 @QC-CRUD-21 @Q-OPS-3
  Scenario: Operations and idempotency keys are restored after a restart
    Given the next request carries header "Idempotency-Key": kit-restart-key
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And I remember the operation
    When the host restarts
    Then the remembered operation reads succeeded
    Given the next request carries header "Idempotency-Key": kit-restart-key
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the response replays the previous operation
    And the listing holds exactly 1 resource named "q"

  @QueueConsumer-0.3.0 @QC-CRUD-13
  Scenario: a consumer is attached again after a restart
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When the host restarts
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then message "m1" is delivered exactly 1 time
