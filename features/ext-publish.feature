@ext-publish
Feature: Publish over HTTP (host extension)
  A host extension, not a rule of the Forms (spec/peers.md §Publish):
  Cloudflare Queues' HTTP publish, SQS SendMessage / SendMessageBatch. POST
  /v2/spaces/{space}/resources/{queue}/messages sends 1..100 messages to an
  AtLeastOnceQueue atomically, with exactly the producer Binding's limits
  and codes, durable before it answers their IDs; a text body is sent as its
  UTF-8 bytes, a base64 body as the bytes it decodes to, and the consumer
  receives those bytes as from a Binding's send. Editors of the queue may
  publish, and so may a principal with a publisher grant naming it, which
  may do nothing else. An Idempotency-Key makes a retry answer the first
  publish's IDs instead of sending again.

  Scenario: a published message is delivered to the queue's consumer once, body intact, attempts 1
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I publish {"tag":"p1","do":"ack"} to "q"
    Then the response status is 200
    And the publish answers 1 message ID
    And message "p1" is delivered with attempts 1
    And every delivery of "p1" carries its send ID and accept time
    And the delivered body of "p1" is exactly the bytes of {"tag":"p1","do":"ack"}
    And message "p1" is not delivered again within 3 seconds

  Scenario: a base64 body is delivered as exactly its bytes, and the largest body as its 127000 bytes
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    # {"tag":"bin","do":"ack","x":"<ff fe ff 80 81 82 83>"}: not UTF-8
    When I publish to "q" the base64 bytes "eyJ0YWciOiJiaW4iLCJkbyI6ImFjayIsIngiOiL//v+AgYKDIn0=" tagged "bin"
    Then the response status is 200
    And the delivered body of "bin" is exactly the published bytes
    When I publish to "q" a 127000-byte message tagged "big" padded with "é"
    Then the response status is 200
    And the delivered body of "big" is 127000 bytes of UTF-8 padded with "é"

  Scenario: a batch is sent atomically: one message over the limit sends none of it
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I publish to "q" a 127001-byte message tagged "over" padded with "é" after 2 messages tagged "before"
    Then the request is refused with 400 "message_too_large"
    And message "before-1" is not delivered within 3 seconds
    And message "before-2" is not delivered within 1 second
    When I publish 3 messages tagged "ok" to "q" in one request
    Then the publish answers 3 message IDs
    And messages "ok-1", "ok-2" and "ok-3" are delivered

  Scenario: the Binding's limits and codes, each refusal sending nothing
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I publish to "q":
      """
      {"messages": []}
      """
    Then the request is refused with 400 "batch_too_large"
    When I publish 101 messages tagged "many" to "q" in one request
    Then the request is refused with 400 "batch_too_large"
    When I publish to "q":
      """
      {"messages": [{"body": "{\"tag\":\"e1\",\"do\":\"ack\"}"}, {"body": ""}]}
      """
    Then the request is refused with 400 "invalid_body"
    When I publish to "q":
      """
      {"messages": [{"body": "{\"tag\":\"e2\",\"do\":\"ack\"}", "delaySeconds": 43201}]}
      """
    Then the request is refused with 400 "invalid_body"
    When I publish to "q":
      """
      {"messages": [{"body": "{\"tag\":\"e3\",\"do\":\"ack\"}", "delaySeconds": -1}]}
      """
    Then the request is refused with 400 "invalid_body"
    When I publish to "q":
      """
      {"messages": [{"body": "not base64!", "bodyEncoding": "base64"}]}
      """
    Then the request is refused with 400 "invalid_body"
    And the problem points at "/messages/0/body"
    When I publish to "q":
      """
      {"messages": [{"body": "{\"tag\":\"e4\",\"do\":\"ack\"}", "contentType": "text/plain"}]}
      """
    Then the request is refused with 400 "invalid_request"
    And message "e1" is not delivered within 3 seconds
    And message "many-1" is not delivered within 1 second
    When I publish 100 messages tagged "hundred" to "q" in one request
    Then the publish answers 100 message IDs

  Scenario: delaySeconds delays a message; without it the queue's deliveryDelaySeconds applies
    Given a queue "q" with spec {"messageRetentionSeconds": 3600, "deliveryDelaySeconds": 3}
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I publish {"tag":"queue-delay","do":"ack"} to "q"
    And I publish {"tag":"no-delay","do":"ack"} to "q" with {"delaySeconds": 0}
    And I publish {"tag":"own-delay","do":"ack"} to "q" with {"delaySeconds": 5}
    Then message "no-delay" is first delivered before message "queue-delay"
    And message "queue-delay" is first delivered no sooner than 3 seconds after it was sent
    And message "own-delay" is first delivered no sooner than 5 seconds after it was sent

  Scenario: a publisher publishes to its queue and does nothing else
    Given a queue "q"
    And a queue "other"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    And a publisher principal "app" of "q"
    When I act as the "app" principal
    And I publish {"tag":"from-app","do":"ack"} to "q"
    Then the publish answers 1 message ID
    And message "from-app" is delivered with attempts 1
    When I publish {"tag":"elsewhere","do":"ack"} to "other"
    Then the request is refused with 403 "forbidden"
    When I GET "/v2/spaces/{{space}}/resources"
    Then the request is refused with 403 "forbidden"
    When I GET "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 403 "forbidden"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:q}}/purge"
    Then the request is refused with 403 "forbidden"
    When I DELETE "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 403 "forbidden"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:w}}/fetch"
    Then the request is refused with 403 "forbidden"

  @needs-viewer @needs-narrow
  Scenario: a viewer may not publish, nor an editor of other Forms, nor anyone without a token; an editor may
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    When I act as the "viewer" principal
    And I publish {"tag":"v","do":"ack"} to "q"
    Then the request is refused with 403 "forbidden"
    When I act as the "narrow" principal
    And I publish {"tag":"n","do":"ack"} to "q"
    Then the request is refused with 403 "forbidden"
    When I act without a token
    And I publish {"tag":"anon","do":"ack"} to "q"
    Then the request is refused with 401 "unauthenticated"
    When I act as the "admin" principal
    And I publish {"tag":"ed","do":"ack"} to "q"
    Then the publish answers 1 message ID
    And message "ed" is delivered with attempts 1
    And message "v" is not delivered within 2 seconds
    And message "n" is not delivered within 1 second
    And message "anon" is not delivered within 1 second

  Scenario: only a queue takes messages
    Given a worker "w"
    When I POST "/v2/spaces/{{space}}/resources/{{uid:w}}/messages" with body:
      """
      {"messages": [{"body": "x"}]}
      """
    Then the request is refused with 404 "not_a_queue"
    When I POST "/v2/spaces/{{space}}/resources/{{nouid}}/messages" with body:
      """
      {"messages": [{"body": "x"}]}
      """
    Then the request is refused with 404 "not_found"

  Scenario: a retried publish with the same Idempotency-Key answers the same IDs and sends once
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    And the next request carries header "Idempotency-Key": publish-once
    When I publish {"tag":"once","do":"ack"} to "q"
    Then the publish answers 1 message ID
    Given the next request carries header "Idempotency-Key": publish-once
    When I publish {"tag":"once","do":"ack"} to "q"
    Then the publish answers the IDs of the previous publish, replayed
    And message "once" is delivered exactly 1 time
    And message "once" is not delivered again within 3 seconds
    Given the next request carries header "Idempotency-Key": publish-once
    When I publish {"tag":"twice","do":"ack"} to "q"
    Then the request is refused with 422 "idempotency_key_reuse"
    And message "twice" is not delivered within 2 seconds

  @restart
  Scenario: a publish's Idempotency-Key is remembered across a restart
    Given a queue "q"
    And the next request carries header "Idempotency-Key": publish-durable
    When I publish {"tag":"durable","do":"ack"} to "q"
    Then the publish answers 1 message ID
    When the host restarts
    And the next request carries header "Idempotency-Key": publish-durable
    And I publish {"tag":"durable","do":"ack"} to "q"
    Then the publish answers the IDs of the previous publish, replayed
    Given a worker "w"
    And a consumer "c" of "q" by "w"
    Then message "durable" is delivered exactly 1 time
    And message "durable" is not delivered again within 3 seconds
