@AtLeastOnceQueue-0.2.0 @retention @slow
Feature: Message retention
  The shortest retention the Form allows is 60 seconds, so these scenarios
  are @slow (run them with --slow).

  @Q-INPUT-4 @Q-OPS-22 @Q-OPS-10
  Scenario: a message not delivered within messageRetentionSeconds is discarded
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"old","do":"ack"} through "TASKS"
    And message "old" is not delivered within 62 seconds
    And "w" sends {"tag":"fresh","do":"ack"} through "TASKS"
    When a consumer "c" of "q" by "w"
    Then message "fresh" is delivered
    And message "old" is not delivered within 3 seconds

  @Q-INPUT-4 @Q-OPS-10 @Q-OPS-11
  Scenario: a longer retention set by update applies to messages not yet delivered
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"kept","do":"ack"} through "TASKS"
    And "q" has been updated with messageRetentionSeconds=600
    And message "kept" is not delivered within 62 seconds
    When a consumer "c" of "q" by "w"
    Then message "kept" is delivered

  @Q-INPUT-4 @Q-OPS-10 @Q-OPS-22 @QC-DELIV-21
  Scenario: retention counts from the accept time across retries: a message retried past it is gone, one accepted later is not
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=10
    When "w" sends {"tag":"old","do":"retry:25"} through "TASKS"
    And 30 seconds pass
    And "w" sends {"tag":"later","do":["retry:25","retry:25","ack"]} through "TASKS"
    And 60 seconds pass
    Then message "old" is delivered with attempts 1, 2, 3
    And message "later" is delivered with attempts 1, 2, 3

  @Q-OPS-22 @Q-OPS-10 @Q-OBS-3
  Scenario: a message expires at its retention deadline without any other activity on the queue
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"old","do":"ack"} through "TASKS"
    And the messageCount of "q", when observed, becomes 1
    When 62 seconds pass
    Then the messageCount of "q", when observed, becomes 0
    When a consumer "c" of "q" by "w"
    Then message "old" is not delivered within 3 seconds
