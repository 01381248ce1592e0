@QueueConsumer-0.3.0 @batch
Feature: The batch a queue handler receives

  Background:
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"

  @QC-DELIV-7 @QC-DELIV-8 @QC-DELIV-9 @QC-DELIV-10 @QC-DELIV-13 @QC-INTRO-4 @Q-MSG-3 @Q-MSG-6 @Q-MSG-7 @Q-MSG-8 @Q-BIND-7 @Q-MSG-4
  Scenario: a batch has an ID, the queue name and well-formed messages
    Given a consumer "c" of "q" by "w"
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then the first delivery of "m1" came in a well-formed batch of "q" holding at most 1 message
    And every delivery of "m1" carries its send ID and accept time
    And message "m1" is delivered with attempts 1

  @QC-DELIV-9 @Q-MSG-6 @Q-MSG-7 @Q-MSG-8 @QC-DELIV-11
  Scenario: a redelivered message keeps its ID and accept time and counts attempts from 1
    Given a consumer "c" of "q" by "w" with maxRetries=2
    When "w" sends {"tag":"m1","do":["retry","retry","ack"]} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2, 3
    And every delivery of "m1" carries its send ID and accept time

  @QC-DELIV-8 @QC-INPUT-7
  Scenario: no batch holds more than maxBatchSize messages
    Given a consumer "c" of "q" by "w" with maxBatchSize=2; maxBatchTimeoutSeconds=1
    When "w" sends 5 messages tagged "b" through "TASKS" in one batch
    Then messages "b1", "b2", "b3", "b4" and "b5" are delivered
    And every batch from "q" held between 1 and 2 messages
    And some batch from "q" held 2 messages

  @QC-INPUT-8
  Scenario: a full batch does not wait for maxBatchTimeoutSeconds
    Given a consumer "c" of "q" by "w" with maxBatchSize=3; maxBatchTimeoutSeconds=60
    When "w" sends 3 messages tagged "f" through "TASKS" in one batch
    Then message "f1" is first delivered within 10 seconds and the measured slack of its accept time, on the host's clock
    And messages "f2" and "f3" are delivered

  @QC-INPUT-8
  Scenario: a batch that cannot fill is delivered once maxBatchTimeoutSeconds has passed
    Given a consumer "c" of "q" by "w" with maxBatchSize=10; maxBatchTimeoutSeconds=2
    When "w" sends {"tag":"lone","do":"ack"} through "TASKS"
    Then message "lone" is first delivered within 2 seconds and the measured slack of its accept time, on the host's clock

  @QC-INPUT-8 @QC-INPUT-7
  Scenario: sends spread over less than maxBatchTimeoutSeconds arrive as one batch
    Given a consumer "c" of "q" by "w" with maxBatchSize=3; maxBatchTimeoutSeconds=8
    When "w" sends {"tag":"f1","do":"ack"} through "TASKS"
    And 1 second passes
    And "w" sends {"tag":"f2","do":"ack"} through "TASKS"
    And 1 second passes
    And "w" sends {"tag":"f3","do":"ack"} through "TASKS"
    Then messages "f1", "f2" and "f3" came in one batch

  @QC-INPUT-8
  Scenario: a lone message waits for maxBatchTimeoutSeconds before it is delivered
    Given a consumer "c" of "q" by "w" with maxBatchSize=10; maxBatchTimeoutSeconds=3
    When "w" sends {"tag":"lone","do":"ack"} through "TASKS"
    Then message "lone" is first delivered no sooner than 3 seconds after its accept time, on the host's clock

  @QC-INPUT-8
  Scenario: maxBatchTimeoutSeconds 0 does not wait
    Given a consumer "c" of "q" by "w" with maxBatchSize=10; maxBatchTimeoutSeconds=0
    When "w" sends {"tag":"now","do":"ack"} through "TASKS"
    Then message "now" is first delivered within 0 seconds and the measured slack of its accept time, on the host's clock

  @QC-INPUT-9
  Scenario: no more than maxConcurrency batches run at once
    Given a consumer "c" of "q" by "w" with maxConcurrency=2
    When "w" sends a batch through "TASKS":
      """
      {"tag":"s1","do":"sleep:700"}
      {"tag":"s2","do":"sleep:700"}
      {"tag":"s3","do":"sleep:700"}
      {"tag":"s4","do":"sleep:700"}
      {"tag":"s5","do":"sleep:700"}
      {"tag":"s6","do":"sleep:700"}
      """
    Then messages "s1", "s2", "s3", "s4", "s5" and "s6" are delivered
    And message "s6" is not delivered again within 1 second
    And at most 2 handlers for "q" ran at once

  @QC-INPUT-9
  Scenario: maxConcurrency 1 runs one batch at a time
    Given a consumer "c" of "q" by "w" with maxConcurrency=1
    When "w" sends a batch through "TASKS":
      """
      {"tag":"s1","do":"sleep:400"}
      {"tag":"s2","do":"sleep:400"}
      {"tag":"s3","do":"sleep:400"}
      """
    Then messages "s1", "s2" and "s3" are delivered
    And message "s3" is not delivered again within 1 second
    And at most 1 handler for "q" ran at once

  @QC-DELIV-15 @QC-DELIV-14
  Scenario: settlement methods are bound to the batch and take no batch ID
    Given a consumer "c" of "q" by "w"
    When "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    Then the settlement results for "m1" were:
      | call        | outcome |
      | acknowledge | ok      |
    And message "m1" is not delivered again within 2 seconds
