@QueueConsumer-0.3.0 @handler-limit
Feature: The handler time limit
  An invocation that exceeds the host's handler time limit ends as a throw:
  what it settled stands and the rest is retried. The kit needs the limit
  (in-process it is 5 s; pass --handler-timeout for another host).

  Background:
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=1

  @QC-DELIV-26 @QC-CRUD-16
  Scenario: a handler that runs past the limit has its message retried
    When "w" sends {"tag":"m1","do":["spin","ack"]} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2
    And message "m1" is redelivered no sooner than the handler time limit after its first delivery started

  @QC-DELIV-26
  Scenario: a handler that sleeps past the limit has its message retried
    When "w" sends {"tag":"m1","do":["sleep:60000","ack"]} through "TASKS"
    Then message "m1" is delivered with attempts 1, 2
