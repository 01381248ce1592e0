@ext-forensics
Feature: Attempt history and dead-letter groups (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Attempt history,
  §Dead-letter groups): why did this message fail? The host keeps a message's
  last attempts and how each ended, carries them into the dead-letter queue
  with the move, groups a dead-letter queue's messages by the cause of their
  last failure, and redrives one group, with a dry run that moves nothing.
  None of it reaches a worker: only the Host API, to the queue's viewers.

  Background:
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"

  @EXT-FORENSICS-1 @EXT-FORENSICS-2 @EXT-FORENSICS-3 @EXT-FORENSICS-4
  Scenario: a poison message's attempts, with the thrown error, go with it into the dead-letter queue
    Given a consumer "c" of "q" by "w" with maxRetries=2; deadLetterQueue=@dlq
    When "w" sends {"tag":"p1","do":["retry:0","throw"]} through "TASKS"
    And "w" sends {"tag":"ok","do":"ack"} through "TASKS"
    Then "dlq" holds 1 message tagged "p1"
    And the listed message of "dlq" tagged "p1" has 3 attempts: retried, thrown "Error" "kit: directed failure", thrown "Error" "kit: directed failure"
    Given "c" has been deleted
    When I redrive "dlq"
    Then the redrive ends succeeded with progress moved 1, skipped 0, total 1
    And the listed message of "q" tagged "p1" has no attempt history

  @EXT-FORENSICS-5 @EXT-FORENSICS-6 @EXT-FORENSICS-7 @EXT-FORENSICS-8
  Scenario: dead letters are grouped by cause; a group's dry run moves nothing and says how many it would
    Given a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    When "w" sends {"tag":"g1","do":"throw"} through "TASKS"
    And "w" sends {"tag":"g2","do":"throw"} through "TASKS"
    And "w" sends {"tag":"g3","do":"retry:0"} through "TASKS"
    Then "dlq" holds 3 messages tagged "g"
    And the dead letters of "dlq" are in 2 groups: 2 of "Error: kit: directed failure", 1 of "retried"
    And the listed message of "dlq" tagged "g2" is in the group "Error: kit: directed failure"
    Given "c" has been deleted
    When I redrive the group of the listed message of "dlq" tagged "g1" as a dry run
    Then the response status is 202
    And the redrive ends succeeded with progress moved 0, skipped 0, total 2, wouldMove 2
    And the redrive records the group, as a dry run
    And "dlq" holds 3 messages tagged "g"
    When I redrive the group of the listed message of "dlq" tagged "g1"
    Then the redrive ends succeeded with progress moved 2, skipped 0, total 2
    And the redrive records the group
    And "q" holds 2 messages tagged "g"
    And "dlq" holds 1 message tagged "g3"

  @EXT-FORENSICS-9
  Scenario: a redrive of a malformed group is refused and records nothing
    When I redrive "dlq" with group "NOT-A-GROUP"
    Then the request is refused with 400 "invalid_request"
