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

  # A host that claims a value it never observed cannot be told from one
  # that observes at once by HTTP alone (every value it could claim is true
  # by the time it is read): with observation paused in the space, nothing
  # can have been observed, so every read must show {} (spec/host-api.md
  # §observed).
  @AtLeastOnceQueue-0.2.0 @QueueConsumer-0.3.0 @Q-OBS-2 @QC-OBS-1 @observation-control
  Scenario: observed stays {} until the host's first observation, though the Operations succeeded
    Given the host makes no observation in this space
    And a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    Then the observed of "q" stays {} for 2 seconds
    And the observed of "c" stays {} for 1 seconds
    When the host observes again in this space
    Then "q" eventually observes queueExists true, messageCount 0
    And "c" eventually observes queueExists true, workerExists true, consumerAttached true
