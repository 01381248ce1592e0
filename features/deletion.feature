@deletion
Feature: Deletion rules: nothing in cascade, queues kept while referenced

  Background:
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"

  @AtLeastOnceQueue-0.2.0 @QueueConsumer-0.3.0 @Q-OPS-14 @Q-REF-8 @QC-OWN-7 @HAPI-OPS-8
  Scenario Outline: a queue referenced by a consumer is dependency_conflict
    Given a queue "other"
    And a consumer "c" of "<queue>" by "w" with deadLetterQueue=@<dead>
    When I delete "<target>"
    Then the request is refused with 409 "dependency_conflict"
    And "<target>" still exists

    Examples:
      | queue | dead  | target |
      | other | dlq   | other  |
      | other | dlq   | dlq    |

  @AtLeastOnceQueue-0.2.0 @Q-OPS-14 @Q-OPS-15 @Q-REF-8 @Q-REF-9 @Q-BIND-16 @Q-BIND-17 @HAPI-OPS-8
  Scenario: a queue named by an unselected, never-run WorkerVersion is dependency_conflict
    Given a queue "p"
    And an unselected version "spare" of "w" with producer binding SPARE to "p"
    When I delete "p"
    Then the request is refused with 409 "dependency_conflict"
    And "p" still exists

  @AtLeastOnceQueue-0.2.0 @Q-BIND-16 @Q-BIND-18 @Q-REF-11 @Q-OPS-16 @Q-REF-10
  Scenario: once the referring version is deleted, the queue can be deleted and the worker stays
    Given a queue "p"
    And an unselected version "spare" of "w" with producer binding SPARE to "p"
    And "spare" has been deleted
    When I delete "p"
    Then the request is accepted
    And "p" no longer exists
    And "w" still exists

  @QueueConsumer-0.3.0 @QC-CRUD-9 @QC-CRUD-10 @QC-OWN-1 @QC-OWN-6 @Q-REF-10 @Q-OPS-16 @HAPI-OPS-8
  Scenario: deleting a consumer detaches only it; its queues and worker stay
    Given a consumer "c" of "q" by "w" with deadLetterQueue=@dlq
    When I delete "c"
    Then the request is accepted
    And "c" no longer exists
    And "q" still exists
    And "dlq" still exists
    And "w" still exists

  @QueueConsumer-0.3.0 @QC-CRUD-23 @QC-CRUD-12 @QC-CRUD-15 @QC-CRUD-10 @Q-OPS-20
  Scenario: deleting a consumer does not acknowledge unsettled messages
    Given a consumer "c" of "q" by "w" with maxRetries=3; retryDelaySeconds=3
    And "w" sends {"tag":"m1","do":["retry","ack"]} through "TASKS"
    And message "m1" is delivered
    When I delete "c"
    Then the request is accepted
    Given a consumer "c2" of "q" by "w" with maxRetries=3
    Then message "m1" is delivered with attempts 1, 2

  @QueueConsumer-0.3.0 @QC-CRUD-11 @QC-CRUD-23 @QC-CRUD-24 @QC-CRUD-12
  Scenario: deleting a consumer while its handler runs does not acknowledge what the handler left unsettled
    Given a consumer "c" of "q" by "w" with maxRetries=3
    And "w" sends {"tag":"m1","do":["sleep:4000","ack"]} through "TASKS"
    And message "m1" is delivered
    When I delete "c"
    Then the request is accepted
    Given a consumer "c2" of "q" by "w" with maxRetries=3
    Then message "m1" is delivered with attempts 1, 2

  @AtLeastOnceQueue-0.2.0 @Q-OPS-20 @Q-MSG-4 @Q-MSG-5 @QC-CRUD-12
  Scenario: messages sent while no consumer is attached are delivered once one is
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    And message "m1" is not delivered within 2 seconds
    And a consumer "c" of "q" by "w"
    Then message "m1" is delivered exactly 1 time

  @AtLeastOnceQueue-0.2.0 @Q-OPS-13 @Q-OPS-17 @Q-REF-7 @Q-REF-1 @HAPI-RES-3 @EXT-IDLE-6
  Scenario: deleting a queue deletes its messages, and its name is free again
    Given a queue "dead"
    And a worker "w2" with producer binding DEAD to "dead"
    And "w2" sends {"tag":"gone","do":"ack"} through "DEAD"
    And "w2" has been updated with -version
    And "w2-v1" has been deleted
    When I delete "dead"
    Then the request is accepted
    And "dead" no longer exists
    When I create a queue "dead" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    Given a consumer "c" of "dead" by "w"
    Then message "gone" is not delivered within 3 seconds

  @HostAPI-v2
  Scenario: a worker referenced by a consumer is dependency_conflict
    Given a consumer "c" of "q" by "w"
    When I delete "w"
    Then the request is refused with 409 "dependency_conflict"
    And "w" still exists
