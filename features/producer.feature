@AtLeastOnceQueue-0.2.0 @producer-binding
Feature: The producer Binding: send and sendBatch
  A WorkerVersion's queueProducerBindings entry becomes env[name] with send
  and sendBatch only. The kit's worker drives them from its fetch handler.

  Background:
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"

  @Q-BIND-4 @Q-BIND-5 @Q-MSG-1 @Q-MSG-2
  Scenario: env[name] offers send and sendBatch and nothing to receive, peek or settle
    Then the binding "TASKS" of "w" offers exactly send and sendBatch

  @Q-BIND-7 @Q-BIND-12 @Q-MSG-4 @Q-MSG-6 @QC-OWN-5 @Q-INTRO-2
  Scenario: send resolves with a message ID that the delivery carries
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"m1\",\"do\":\"ack\"}"}}
      """
    Then the call resolves with 1 message ID
    And every delivery of "m1" carries its send ID and accept time

  @Q-BIND-8 @Q-MSG-6
  Scenario: sendBatch resolves with the IDs in input order
    When "w" sends a batch through "TASKS":
      """
      {"tag":"o1","do":"ack"}
      {"tag":"o2","do":"ack"}
      {"tag":"o3","do":"ack"}
      """
    Then every delivery of "o1" carries its send ID and accept time
    And every delivery of "o2" carries its send ID and accept time
    And every delivery of "o3" carries its send ID and accept time

  @Q-BIND-8
  Scenario: sendBatch accepts 1 and 100 messages
    When "w" calls "TASKS" with a batch of 100 messages
    Then the call resolves with 100 message IDs
    When "w" calls "TASKS" with a batch of 1 messages
    Then the call resolves with 1 message ID

  @Q-BIND-8 @Q-BIND-13
  Scenario Outline: sendBatch of 0 or 101 messages is batch_too_large
    When "w" calls "TASKS" with a batch of <n> messages
    Then the call rejects with "batch_too_large"
    And message "n1" is not delivered within 2 seconds

    Examples:
      | n   |
      | 0   |
      | 101 |

  @Q-BIND-8 @Q-BIND-13 @Q-UNK-1 @Q-UNK-2 @Q-UNK-4
  Scenario Outline: sendBatch is atomic: one bad message sends nothing
    When "w" calls "TASKS" with:
      """
      {"op": "sendBatch", "messages": [
        {"body": {"string": "{\"tag\":\"good\",\"do\":\"ack\"}"}},
        <bad>
      ]}
      """
    Then the call rejects with "<name>"
    And message "good" is not delivered within 3 seconds

    Examples:
      | bad                                                  | name              |
      | {"body": {"raw": {"not": "a body"}}}                 | invalid_body      |
      | {"body": {"string": "x"}, "priority": 1}             | invalid_body      |
      | {"body": {"string": "x"}, "delaySeconds": 43201}     | invalid_body      |
      | {"body": {"padded": 127001, "tag": "big"}}           | message_too_large |

  @Q-BIND-11 @Q-BIND-9 @QC-DELIV-9
  Scenario Outline: a body of 127000 bytes is accepted and delivered whole
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"padded": 127000, "tag": "big", "char": "<char>", "as": "<as>"}}
      """
    Then the call resolves with 1 message ID
    And the delivered body of "big" is 127000 bytes of UTF-8 padded with "<char>"

    Examples:
      | char | as     |
      | a    | string |
      | a    | bytes  |
      | é    | string |
      | あ   | string |

  @Q-BIND-11 @Q-BIND-9 @Q-BIND-13
  Scenario Outline: a body of 127001 bytes is message_too_large, counting UTF-8 bytes of a string
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"padded": 127001, "tag": "big", "char": "<char>", "as": "<as>"}}
      """
    Then the call rejects with "message_too_large"
    And message "big" is not delivered within 2 seconds

    Examples:
      | char | as     |
      | a    | string |
      | a    | bytes  |
      | é    | string |
      | あ   | string |

  @Q-BIND-6 @Q-BIND-9 @QC-DELIV-9
  Scenario: a string body is sent as its UTF-8 bytes
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"utf\",\"text\":\"héあ😀\"}"}}
      """
    Then the call resolves with 1 message ID
    And the delivered body of "utf" is exactly the bytes of {"tag":"utf","text":"héあ😀"}

  @Q-BIND-6 @QC-DELIV-9
  Scenario Outline: ArrayBuffer and ArrayBufferView bodies send exactly the viewed bytes
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": <body>}
      """
    Then the call resolves with 1 message ID
    And the delivered body of "<tag>" is exactly the bytes of <text>

    Examples:
      | body                                                                   | tag | text          |
      | {"bytes": "eyJ0YWciOiJhYiJ9"}                                          | ab  | {"tag":"ab"}  |
      | {"view": "eyJ0YWciOiJ1OCJ9", "kind": "Uint8Array", "offset": 5}        | u8  | {"tag":"u8"}  |
      | {"view": "eyJ0YWciOiJkdiJ9", "kind": "DataView", "offset": 3}          | dv  | {"tag":"dv"}  |
      | {"view": "eyJ0YWciOiJpMTZ4In0=", "kind": "Int16Array", "offset": 4}    | i16x | {"tag":"i16x"} |

  @Q-BIND-6 @Q-BIND-13 @Q-BIND-14 @ABI-BIND-1
  Scenario Outline: a body of another type is invalid_body
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"raw": <raw>}}
      """
    Then the call rejects with "invalid_body"

    Examples:
      | raw              |
      | {"tag": "obj"}   |
      | 42               |
      | null             |
      | true             |
      | ["a", "b"]       |
      | ""               |

  @Q-BIND-6 @Q-BIND-10 @Q-BIND-13 @Q-UNK-1 @Q-UNK-2 @Q-UNK-4 @ABI-BIND-1
  Scenario Outline: send options are closed and delaySeconds is an integer in 0..43200
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"opt\",\"do\":\"ack\"}"}, "options": <options>}
      """
    Then the call rejects with "invalid_body"
    And message "opt" is not delivered within 2 seconds

    Examples:
      | options                              |
      | {"delay": 1}                         |
      | {"delaySeconds": 0, "priority": 1}   |
      | {"delaySeconds": -1}                 |
      | {"delaySeconds": 43201}              |
      | {"delaySeconds": "5"}                |
      | {"delaySeconds": 1.5}                |

  @Q-BIND-6 @Q-BIND-10
  Scenario Outline: send options within range are accepted
    When "w" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"opt\",\"do\":\"ack\"}"}, "options": <options>}
      """
    Then the call resolves with 1 message ID

    Examples:
      | options                 |
      | {}                      |
      | {"delaySeconds": 0}     |
      | {"delaySeconds": 43200} |

  @Q-BIND-13 @ABI-BIND-1
  Scenario: sendBatch of something that is not an array rejects with invalid_body
    When "w" calls "TASKS" with:
      """
      {"op": "sendBatch", "messagesRaw": {"body": "x"}}
      """
    Then the call rejects with "invalid_body"
