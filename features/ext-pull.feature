@ext-pull
Feature: Pull consumers (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Pull consumers):
  Cloudflare Queues' HTTP pull consumers, SQS ReceiveMessage /
  DeleteMessage / ChangeMessageVisibility. A PullConsumer resource (the
  host's Form https://queuehost.takoform.com/forms/PullConsumer/0.1.0/)
  makes its queue consumed over HTTP instead of by a QueueConsumer, never
  both. POST …/resources/{pullConsumer}/leases leases visible messages for
  a visibility timeout, each delivery counted; POST …/leases/{id}/settle
  acknowledges or retries them, each at most once; POST …/leases/{id}/extend
  hides them longer. An expired lease's messages are leased again with
  their attempts counted, and after 1 + maxRetries deliveries they are
  dead-lettered as new messages. The expiry windows come from the shortest
  visibility timeout the extension allows (1 second), the kit's timing
  slack and its delivery bound, never from fixed sleeps.

  Scenario: a lease hides its messages until it expires; then they are leased again, attempts counted, and dead-lettered after 1 + maxRetries deliveries
    Given a queue "q"
    And a queue "dlq"
    And a pull consumer "pc" of "q" with {"maxRetries": 1} dead-lettering into "dlq"
    And a pull consumer "pd" of "dlq"
    When I publish 3 messages tagged "exp" to "q" in one request
    And I lease up to 10 messages from "pc" for the shortest visibility timeout as "L1"
    Then lease "L1" holds 3 messages with attempts 1
    And no message of "pc" can be leased until lease "L1" expires
    When the messages of lease "L1" are leased again from "pc" as "L2" once it expired
    Then lease "L2" holds 3 messages with attempts 2
    When I acknowledge every message of lease "L1"
    Then the request is refused with 409 "lease_expired"
    When I lease up to 10 messages from "pd" waiting until lease "L2" expired as "D"
    Then lease "D" holds the bodies of lease "L2" under new IDs, with attempts 1
    And no message of "pc" can be leased

  Scenario: acknowledge and retry per message, each at most once; a retried message comes back after its delay; a fully settled lease ends
    Given a queue "q"
    And a pull consumer "pc" of "q"
    When I publish 3 messages tagged "s" to "q" in one request
    And I lease up to 3 messages from "pc" as "L"
    Then lease "L" holds 3 messages with attempts 1
    When I acknowledge message 1 of lease "L"
    Then the settlement answers 1 acknowledged and 0 retried
    When I acknowledge message 1 of lease "L"
    Then the request is refused with 409 "already_settled"
    When I retry message 2 of lease "L" with delay 0
    Then the settlement answers 0 acknowledged and 1 retried
    When I lease up to 3 messages from "pc" as "R"
    Then lease "R" holds message 2 of lease "L" with attempts 2
    When I acknowledge message 3 of lease "L"
    And I acknowledge message 3 of lease "L"
    Then the request is refused with 409 "lease_settled"
    When I extend lease "L" by the shortest visibility timeout
    Then the request is refused with 409 "lease_settled"

  Scenario: an extended lease keeps its messages past its first expiry
    Given a queue "q"
    And a pull consumer "pc" of "q"
    When I publish 1 messages tagged "x" to "q" in one request
    And I lease up to 1 messages from "pc" for the shortest visibility timeout as "L"
    And I extend lease "L" by 10 times the shortest visibility timeout
    Then the extension answers an expiry later than the lease's first
    And no message of "pc" can be leased until lease "L"'s first expiry has passed
    When I acknowledge every message of lease "L"
    Then the settlement answers 1 acknowledged and 0 retried

  Scenario: concurrent pullers never hold one message at once
    Given a queue "q"
    And a pull consumer "pc" of "q"
    When I publish 100 messages tagged "c1" to "q" in one request
    And I publish 100 messages tagged "c2" to "q" in one request
    And 8 pullers lease up to 7 messages at a time from "pc" concurrently until it is empty, acknowledging each lease
    Then no message was in two leases, and all 200 were leased once

  Scenario: bad inputs are refused with specific problems and change nothing
    Given a queue "q"
    And a queue "q2"
    And a worker "w"
    And a consumer "c" of "q2" by "w"
    And a pull consumer "pc" of "q"
    And a queue "q3"
    And a pull consumer "pc3" of "q3"
    When I create a pull consumer "again" of "q"
    Then the request is refused with 409 "consumer_conflict"
    When I create a pull consumer "onq2" of "q2"
    Then the request is refused with 409 "consumer_conflict"
    When I create a consumer "c2" of "q" by "w"
    Then the request is refused with 409 "consumer_conflict"
    When I lease up to 1 messages from "c" as "X"
    Then the request is refused with 404 "not_a_pull_consumer"
    When I lease up to 1 messages from "q" as "X"
    Then the request is refused with 404 "not_a_pull_consumer"
    When I publish 2 messages tagged "b" to "q" in one request
    And I lease up to 2 messages from "pc" as "L"
    And I settle lease "not-a-lease" of "pc"
    Then the request is refused with 404 "unknown_lease"
    When I acknowledge message "not-in-the-lease" of lease "L"
    Then the request is refused with 409 "unknown_message"
    When I acknowledge message 1 of lease "L" through "pc3"
    Then the request is refused with 409 "wrong_consumer"
    When I acknowledge message 1 of lease "L" and retry it too
    Then the request is refused with 400 "invalid_request"
    When I lease up to 101 messages from "pc" as "X"
    Then the request is refused with 400 "invalid_request"
    When I lease up to 1 messages from "pc" waiting 21 seconds as "X"
    Then the request is refused with 400 "invalid_request"
    And lease "L" still holds 2 unsettled messages

  Scenario: a consumer principal leases and settles its queue's messages and does nothing else
    Given a queue "q"
    And a queue "other"
    And a pull consumer "pc" of "q"
    And a pull consumer "po" of "other"
    And a consumer principal "app" of "q"
    When I publish 1 messages tagged "a" to "q" in one request
    And I publish 1 messages tagged "o" to "other" in one request
    And I act as the "app" principal
    And I lease up to 1 messages from "pc" as "L"
    Then lease "L" holds 1 messages with attempts 1
    When I acknowledge every message of lease "L"
    Then the settlement answers 1 acknowledged and 0 retried
    When I lease up to 1 messages from "po" as "X"
    Then the request is refused with 403 "forbidden"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 403 "forbidden"
    When I publish {"tag":"from-app","do":"ack"} to "q"
    Then the request is refused with 403 "forbidden"

  @restart
  Scenario: a lease survives a restart: its messages stay hidden until it expires, and its ID still settles them
    Given a queue "q"
    And a pull consumer "pc" of "q"
    When I publish 2 messages tagged "r" to "q" in one request
    And I lease up to 2 messages from "pc" for 600 seconds as "L"
    And the host restarts
    Then no message of "pc" can be leased
    When I acknowledge message 1 of lease "L"
    Then the settlement answers 1 acknowledged and 0 retried
    When I extend lease "L" by the shortest visibility timeout
    And the messages of lease "L" are leased again from "pc" as "L2" once it expired
    Then lease "L2" holds message 2 of lease "L" with attempts 2
