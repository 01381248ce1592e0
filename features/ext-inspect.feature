@ext-inspect
Feature: Queue inspection (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Inspection):
  RabbitMQ's per-queue counts and SQS's queue attributes, and a paged
  listing of a queue's messages. GET
  /v2/spaces/{space}/resources/{queue}/stats counts the queue's messages by
  state; GET .../messages lists them a page at a time, oldest accepted
  first, each with a bounded body preview. Both are reads: viewers of the
  queue may use them, and they never deliver, settle or change anything.

  @EXT-INSPECT-1 @EXT-INSPECT-2 @EXT-INSPECT-10
  Scenario: the stats count available and delayed messages
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends {"tag":"now","do":"ack"} through "TASKS"
    And "w" sends {"tag":"later","do":"ack"} through "TASKS" with options {"delaySeconds": 600}
    Then the stats of "q" become 2 messages: 1 available, 1 delayed, 0 retry-waiting, 0 in flight
    And the listed message of "q" tagged "now" is in state "available" with attempts 0
    And the listed message of "q" tagged "later" is in state "delayed" with attempts 0
    Given a consumer "c" of "q" by "w"
    Then message "now" is delivered with attempts 1
    And message "later" is not delivered within 3 seconds

  @EXT-INSPECT-2
  Scenario: the stats count a message waiting for its retry, and one in flight
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; retryDelaySeconds=600; maxRetries=3
    When "w" sends {"tag":"r","do":"retry"} through "TASKS"
    And message "r" is delivered
    Then the stats of "q" become 1 message: 0 available, 0 delayed, 1 retry-waiting, 0 in flight
    And the listed message of "q" tagged "r" is in state "retry_waiting" with attempts 1
    When "w" sends {"tag":"s","do":"sleep-ack:4000"} through "TASKS"
    And message "s" is delivered
    Then the stats of "q" become 2 messages: 0 available, 0 delayed, 1 retry-waiting, 1 in flight

  @EXT-INSPECT-5
  Scenario: a listing walks every message once, oldest first, a page at a time
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends 25 messages tagged "p" through "TASKS" in one batch
    And "w" sends 12 messages tagged "o" through "TASKS" in one batch
    Then listing the messages of "q" 10 at a time yields 37 messages, oldest first
    And listing the messages of "q" 100 at a time yields 37 messages, oldest first
    And listing the messages of "q" 1 at a time yields 37 messages, oldest first

  @EXT-INSPECT-6
  Scenario: a listed body is previewed up to 256 bytes
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"padded": 1000, "tag": "big"}}
      """
    Then the listed message of "q" tagged "big" has a 256-byte preview of its 1000-byte body, truncated

  @EXT-INSPECT-11 @EXT-INSPECT-12
  Scenario: a dead-lettered message is listed with where it came from and why
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=1; deadLetterQueue=@dlq
    When "w" sends {"tag":"m1","do":"retry"} through "TASKS"
    Then message "m1" is delivered from "q" with attempts 1, 2
    And the listed message of "dlq" tagged "m1" was dead-lettered from "q" by "c" after 2 attempts, reason "retries_exhausted"
    When "w" sends {"tag":"m2","do":"ack"} through "TASKS"
    Then the listed message of "q" tagged "m2" has no dead-letter metadata

  @EXT-INSPECT-7
  Scenario: a viewer reads the stats and the listing
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And "w" sends {"tag":"m1","do":"ack"} through "TASKS"
    When I act as the "viewer" principal
    Then the stats of "q" become 1 message: 1 available, 0 delayed, 0 retry-waiting, 0 in flight
    And listing the messages of "q" 10 at a time yields 1 message, oldest first

  @EXT-INSPECT-7 @HAPI-AUTH-9
  Scenario: a principal without a grant on the queue's Form reads neither
    Given a queue "q"
    When I act as the "narrow" principal
    And I GET "/v2/spaces/{{space}}/resources/{{uid:q}}/stats"
    Then the request is refused with 403 "forbidden"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}/messages"
    Then the request is refused with 403 "forbidden"

  @EXT-INSPECT-9
  Scenario: only a queue has messages to inspect, and a bad page is refused
    Given a queue "q"
    And a worker "w"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:w}}/stats"
    Then the request is refused with 404 "not_a_queue"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:w}}/messages"
    Then the request is refused with 404 "not_a_queue"
    When I GET "/v2/spaces/{{space}}/resources/{{nouid}}/stats"
    Then the request is refused with 404 "not_found"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}/messages?pageToken=bm9wZQ"
    Then the request is refused with 400 "invalid_request"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}/messages?limit=0"
    Then the request is refused with 400 "invalid_request"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}/messages?limit=101"
    Then the request is refused with 400 "invalid_request"

  @EXT-INSPECT-4
  Scenario: the counts since the engine started count each delivery, acknowledgement, retry and dead-lettering
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=1; retryDelaySeconds=0; deadLetterQueue=@dlq
    When "w" sends {"tag":"a","do":"ack"} through "TASKS"
    And "w" sends {"tag":"b","do":"retry"} through "TASKS"
    Then message "b" is delivered with attempts 1, 2
    And message "a" is delivered exactly 1 time
    And the counts of "q" since the engine started become: accepted 2, delivered 3, acknowledged 1, retried 1, deadLettered 1, discarded 0, expired 0

  @EXT-INSPECT-4
  Scenario: a discarded message is counted as discarded, not dead-lettered
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=0
    When "w" sends {"tag":"d","do":"throw"} through "TASKS"
    Then message "d" is delivered exactly 1 time
    And the counts of "q" since the engine started become: accepted 1, delivered 1, acknowledged 0, retried 0, deadLettered 0, discarded 1, expired 0

  @EXT-INSPECT-6
  Scenario: a listed message shows the ID and accept time a worker sees, its visible time, and a whole short body untruncated
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=3; retryDelaySeconds=600
    When "w" sends {"tag":"seen","do":"retry"} through "TASKS"
    And message "seen" is delivered
    Then the listed message of "q" tagged "seen" carries the ID and accept time its delivery carried
    And the listed message of "q" tagged "seen" has its whole 27-byte body as preview, not truncated
    When "w" sends {"tag":"later","do":"ack"} through "TASKS" with options {"delaySeconds": 600}
    Then the listed message of "q" tagged "later" becomes visible 600 seconds after its accept time
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"padded": 256, "tag": "edge"}}
      """
    Then the listed message of "q" tagged "edge" has its whole 256-byte body as preview, not truncated

  @ext-pause @handler-limit @EXT-INSPECT-3
  Scenario: the stats show the batches in flight, the delivery state and the age of the oldest message
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxBatchSize=1; maxRetries=100; retryDelaySeconds=0
    When "w" sends {"tag":"s","do":"sleep:600000"} through "TASKS"
    And message "s" is delivered
    Then the stats of "q" show 1 batch in flight, delivery active, and the oldest message at least 0 seconds old
    Given "c" has been deleted
    And "q" has been paused
    And 2 seconds pass
    Then the stats of "q" show 0 batches in flight, delivery inactive, and the oldest message at least 2 seconds old

  @EXT-INSPECT-13
  Scenario: a dead-lettered message reaches a handler with the Form's fields only
    Given a queue "q"
    And a queue "dlq"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w" with maxRetries=0; deadLetterQueue=@dlq
    And a consumer "cd" of "dlq" by "w"
    When "w" sends {"tag":"dl","do":["throw","ack"]} through "TASKS"
    Then message "dl" is delivered from "dlq"
    And message "dl" arrives in "dlq" as a new message

  @restart @EXT-INSPECT-8
  Scenario: a page token read before a restart reads on after it
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    When "w" sends 10 messages tagged "p" through "TASKS" in one batch
    And 1 second passes
    And "w" sends 10 messages tagged "o" through "TASKS" in one batch
    And I read the first page of 10 messages of "q"
    And the host restarts
    Then reading on from that page's token yields the 10 messages not listed yet, none older
