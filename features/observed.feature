@observed
Feature: observed and output

  @AtLeastOnceQueue-0.2.0 @Q-OBS-1 @Q-OBS-2 @Q-OBS-5 @Q-OPS-5
  Scenario: a queue's observed is {} or confirmed, becomes queueExists true, and output is always {}
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And the observed of "q" is {} or a confirmed observation
    And "q" eventually observes queueExists true
    And the output of "q" is {}

  @AtLeastOnceQueue-0.2.0 @Q-OBS-3 @Q-OBS-4
  Scenario: messageCount, when present, is an integer of at least 0
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends {"tag":"m1"} through "TASKS"
    Then "q" eventually observes queueExists true
    And the observed of "q" is {} or a confirmed observation

  @QueueConsumer-0.3.0 @QC-OBS-1 @QC-OBS-2 @QC-OBS-3 @QC-OBS-4 @QC-CRUD-3
  Scenario: a consumer's observed becomes queueExists, workerExists and consumerAttached true
    Given a queue "q"
    And a worker "w"
    When I create a consumer "c" of "q" by "w"
    Then the request is accepted
    And the observed of "c" is {} or a confirmed observation
    And "c" eventually observes queueExists true, workerExists true, consumerAttached true
    And the output of "c" is {}

  @QueueConsumer-0.3.0 @QC-OBS-3 @QC-OBS-5
  Scenario: a consumer whose handler always fails is still attached
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"m1","do":"throw"} through "TASKS"
    Then message "m1" is delivered exactly 1 time
    And "c" eventually observes consumerAttached true
    And the output of "c" is {}
