@QueueConsumer-0.3.0 @consumer-rules
Feature: One consumer per queue, immutable references, updatable settings

  Background:
    Given a queue "q"
    And a queue "q3"
    And a worker "w" with producer bindings TASKS to "q", Q3 to "q3"
    And a consumer "c" of "q" by "w"

  @QC-DELIV-32 @QC-DELIV-33 @QC-CRUD-1 @QC-CRUD-2 @Q-MSG-9 @Q-MSG-10
  Scenario: a second consumer of the same queue is consumer_conflict
    Given a worker "w2"
    When I create a consumer "c2" of "q" by "w2"
    Then the request is refused with 409 "consumer_conflict"
    And the listing holds exactly 0 resources named "c2"

  @QC-DELIV-32 @QC-INPUT-3 @QC-CRUD-9
  Scenario: after the consumer is deleted the queue can get a new one, and the name is free again
    Given "c" has been deleted
    When I create a consumer "c" of "q" by "w"
    Then the request is accepted

  @QC-INPUT-2 @QC-INPUT-5 @QC-INPUT-6 @QC-CRUD-6
  Scenario Outline: changing queue or worker is invalid_spec
    Given a queue "q2"
    And a worker "w2"
    When I update "c" with <field>=@<other>
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/spec/<field>"
    And "c" is at generation 1

    Examples:
      | field  | other |
      | queue  | q2    |
      | worker | w2    |

  @QC-INPUT-4 @QC-INPUT-10 @QC-CRUD-5 @QC-DELIV-28
  Scenario: an accepted settings update applies to later batches
    Given "w" sends {"tag":"before","do":"retry"} through "TASKS"
    And message "before" is delivered exactly 1 time
    When I update "c" with maxRetries=2
    Then the request is accepted
    When "w" sends {"tag":"after","do":"retry"} through "TASKS"
    Then message "after" is delivered with attempts 1, 2, 3

  @QC-CRUD-7 @QC-DELIV-34 @QC-INPUT-10
  Scenario: a refused settings update is not applied to delivery, not even before its checks refuse it
    Given a consumer "c3" of "q3" by "w" with deadLetterQueue=@q
    When I update "c" with maxRetries=3; deadLetterQueue=@q3
    Then the request is refused with 422 "dead_letter_cycle"
    And "c" is at generation 1
    When "w" sends {"tag":"r","do":"retry"} through "TASKS"
    Then message "r" is delivered exactly 1 time

  @QC-OBS-5 @Q-OBS-6 @Q-MSG-4 @Q-BIND-12
  Scenario: a successful create means the settings were accepted, not that handlers succeed
    When I create a consumer "c3" of "q3" by "w"
    Then the request is accepted
    When "w" sends {"tag":"bad","do":"throw"} through "Q3"
    Then message "bad" is delivered exactly 1 time
    And "c3" still exists
