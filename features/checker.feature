@checker @QueueConsumer-0.3.0 @AtLeastOnceQueue-0.2.0
Feature: The queue checker: every message accounted for
  Thousands of messages go through the test worker; the kit records every
  send result and every delivery, then classifies each message as Jepsen's
  total-queue checker does: ok, lost (sent and never delivered or never
  acknowledged), duplicated (delivered again after an acknowledgement of it
  resolved), unexpected (never sent, or under another ID), recovered (its
  send failed or its outcome was unknown, and it was delivered anyway) and
  over-delivered (more than 1 + maxRetries deliveries). Redelivery before
  an acknowledgement resolved is the at-least-once contract and is only
  counted. The report is printed at the end of the run and written to the
  results bundle.

  Each scenario runs alone (@serial, or @restart): thousands of messages
  load the whole host, and every time window of a scenario running beside
  them would measure that load rather than the host's rules.

  @serial @QC-CRUD-12 @QC-CRUD-15 @QC-CRUD-17 @QC-DELIV-16 @QC-DELIV-28 @Q-MSG-4 @Q-BIND-8
  Scenario: 3 queues of 2000 messages each: nothing lost, nothing duplicated after its acknowledgement, none over-delivered
    Given 3 checked queues consumed by "w" with maxBatchSize=50; maxConcurrency=4; maxRetries=2
    When 2000 messages are sent to each checked queue, every 10th retried once
    Then the checker accounts for every message

  @restart @QC-CRUD-13 @QC-CRUD-16
  Scenario: 2 queues of 600 messages each while the host restarts twice
    Given 2 checked queues consumed by "w" with maxBatchSize=20; maxConcurrency=2; maxRetries=5
    When 600 messages are sent to each checked queue, every 10th retried once, while the host restarts 2 times
    Then the checker accounts for every message

  @serial @store-faults @QC-CRUD-14 @QC-CRUD-15 @QC-CRUD-16
  Scenario: 2 queues of 300 messages each while settlements fail for a while
    Given 2 checked queues consumed by "w" with maxBatchSize=10; maxConcurrency=2; maxRetries=20; retryDelaySeconds=1
    And the host's store fails every write of settlements for the checked queues
    When 300 messages are sent to each checked queue, every 10th retried once
    And 3 seconds pass
    And the host's store works again
    Then the checker accounts for every message
