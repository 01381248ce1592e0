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
