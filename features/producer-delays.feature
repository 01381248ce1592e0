@AtLeastOnceQueue-0.2.0 @delivery-delay
Feature: Delivery delay: the queue default and the per-send override

  @Q-INPUT-3 @Q-BIND-10
  Scenario: a send's delaySeconds wins over the queue's deliveryDelaySeconds
    Given a queue "q" with spec {"messageRetentionSeconds": 600, "deliveryDelaySeconds": 4}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"default","do":"ack"} through "TASKS"
    And "w" sends {"tag":"now","do":"ack"} through "TASKS" with options {"delaySeconds": 0}
    Then message "now" is first delivered before message "default"
    And message "default" is first delivered no sooner than 4 seconds after it was sent

  @Q-INPUT-3 @Q-BIND-10
  Scenario: without a queue default, a send's delaySeconds delays it
    Given a queue "q" with spec {"messageRetentionSeconds": 600}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"late","do":"ack"} through "TASKS" with options {"delaySeconds": 3}
    And "w" sends {"tag":"now","do":"ack"} through "TASKS"
    Then message "now" is first delivered before message "late"
    And message "late" is first delivered no sooner than 3 seconds after it was sent

  @Q-INPUT-3 @Q-OPS-9
  Scenario: an update of deliveryDelaySeconds affects only later sends
    Given a queue "q" with spec {"messageRetentionSeconds": 600, "deliveryDelaySeconds": 5}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"early","do":"ack"} through "TASKS"
    And "q" has been updated with deliveryDelaySeconds=0
    And "w" sends {"tag":"later","do":"ack"} through "TASKS"
    Then message "later" is first delivered before message "early"
    And message "early" is first delivered no sooner than 5 seconds after it was sent

  @Q-OPS-6 @QC-CRUD-4
  Scenario: reading the queue and the consumer does not start delivery
    Given a queue "q" with spec {"messageRetentionSeconds": 600, "deliveryDelaySeconds": 3}
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    And I read "q"
    And I read "c"
    And I read "q"
    Then message "m1" is first delivered no sooner than 3 seconds after it was sent
