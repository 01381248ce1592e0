@QueueConsumer-0.3.0 @retries
Feature: Retries, retry delay, dead-letter and discard

  Background:
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"

  @QC-DELIV-27 @QC-DELIV-28 @QC-INPUT-10
  Scenario: maxRetries counts redeliveries, not the first delivery
    Given a consumer "c" of "q" by "w" with maxRetries=2
    When "w" sends {"tag":"m1","do":"retry"} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2, 3

  @QC-DELIV-27 @QC-DELIV-28 @QC-DELIV-29 @QC-INPUT-12
  Scenario: maxRetries 0 delivers once, then discards without a dead-letter queue
    Given a consumer "c" of "q" by "w" with maxRetries=0
    When "w" sends {"tag":"m1","do":"throw"} through "TASKS"
    Then message "m1" is delivered with attempts 1

  @QC-DELIV-29 @QC-DELIV-30 @QC-DELIV-31 @QC-DELIV-35 @QC-INPUT-12 @QC-CRUD-10
  Scenario: an exhausted message moves to the dead-letter queue as a new message
    Given a consumer "c" of "q" by "w" with maxRetries=1; deadLetterQueue=@dlq
    And a consumer "dc" of "dlq" by "w"
    When "w" sends {"tag":"m1","do":"retry"} through "TASKS"
    Then message "m1" is delivered from "q" with attempts 1, 2
    And message "m1" arrives in "dlq" as a new message
    And message "m1" is delivered from "dlq" with attempts 1

  @QC-DELIV-29 @QC-DELIV-30
  Scenario: a thrown message also dead-letters after 1 + maxRetries deliveries
    Given a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    And a consumer "dc" of "dlq" by "w"
    When "w" sends {"tag":"m1","do":"throw"} through "TASKS"
    Then message "m1" is delivered from "q" with attempts 1
    And message "m1" arrives in "dlq" as a new message

  @QC-DELIV-21 @QC-INPUT-11 @QC-DELIV-17
  Scenario: retry without a delay waits retryDelaySeconds
    Given a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=2
    When "w" sends {"tag":"m1","do":["retry","ack"]} through "TASKS"
    Then message "m1" is redelivered no sooner than 2 seconds after its first delivery
    And message "m1" is delivered with attempts 1, 2

  @QC-DELIV-21 @QC-DELIV-17
  Scenario: an explicit retry delay wins over retryDelaySeconds
    Given a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=43200
    When "w" sends {"tag":"m1","do":["retry:0","ack"]} through "TASKS"
    Then message "m1" is redelivered within 5 seconds and the measured slack after its first delivery

  @QC-DELIV-17 @QC-DELIV-21
  Scenario: an explicit retry delay is honoured
    Given a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=0
    When "w" sends {"tag":"m1","do":["retry:2","ack"]} through "TASKS"
    Then message "m1" is redelivered no sooner than 2 seconds after its first delivery

  @QC-DELIV-19 @QC-DELIV-22
  Scenario: retryAll with a delay is honoured
    Given a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=0
    When "w" sends {"tag":"m1","do":["retryall:2","ack"]} through "TASKS"
    Then message "m1" is redelivered no sooner than 2 seconds after its first delivery

  @QC-DELIV-26 @QC-INPUT-11
  Scenario: a throw retries after retryDelaySeconds
    Given a consumer "c" of "q" by "w" with maxRetries=1; retryDelaySeconds=2
    When "w" sends {"tag":"m1","do":["throw","ack"]} through "TASKS"
    Then message "m1" is redelivered no sooner than 2 seconds after its first delivery

  @QC-DELIV-17 @QC-DELIV-19
  Scenario Outline: a retry delay outside 0..43200 or not an integer is refused and settles nothing
    Given a consumer "c" of "q" by "w" with maxRetries=1
    When "w" sends {"tag":"m1","do":"<directive>"} through "TASKS"
    Then the first settlement call for "m1" was rejected
    And message "m1" is delivered exactly 1 time

    Examples:
      | directive     |
      | retry:43201   |
      | retry:-1      |
      | retry:1.5     |
      | retryall:43201 |
