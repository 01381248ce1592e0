@QueueConsumer-0.3.0 @references
Feature: QueueConsumer references
  References are fixed to a resourceUid of the same host and space whose
  Form URL is exactly the expected one; anything else is refused before any
  side effect.

  Background:
    Given a queue "q"
    And a queue "d"
    And a worker "w"

  @QC-DELIV-1 @QC-DELIV-2 @QC-DELIV-33 @QC-OWN-3 @QC-CRUD-1 @QC-CRUD-2
  Scenario Outline: a reference to a missing resource or one of the wrong Form is invalid_reference
    When I create a consumer "c" of "q" by "w" with <field>=<value>
    Then the request is refused with 422 "invalid_reference"
    And the problem points at "/spec/<field>"
    And the listing holds exactly 0 resources named "c"

    Examples:
      | field           | value                            |
      | queue           | {"resourceUid": "{{nouid}}"}     |
      | worker          | {"resourceUid": "{{nouid}}"}     |
      | queue           | {"resourceUid": "{{uid:w}}"}     |
      | worker          | {"resourceUid": "{{uid:q}}"}     |
      | worker          | {"resourceUid": "{{uid:w-v1}}"}  |
      | deadLetterQueue | {"resourceUid": "{{nouid}}"}     |
      | deadLetterQueue | {"resourceUid": "{{uid:w}}"}     |

  @QC-DELIV-1 @Q-REF-5 @QC-OWN-8
  Scenario: a reference is resolved by UID only, never by name
    When I create a consumer "c" of "q" by "w" with queue={"resourceUid": "{{name:q}}"}
    Then the request is refused with 422 "invalid_reference"
    And the problem points at "/spec/queue"

  @QC-DELIV-2 @QC-DELIV-4 @QC-DELIV-33 @QC-OWN-3 @Q-REF-3 @Q-REF-5
  Scenario Outline: a queue of another space is refused like a missing one
    Given a queue "elsewhere" in another space
    When I create a consumer "c" of "q" by "w" with <field>=@elsewhere
    Then the request is refused with 422 "invalid_reference"
    And the problem points at "/spec/<field>"

    Examples:
      | field           |
      | queue           |
      | deadLetterQueue |

  @QC-DELIV-33 @QC-OWN-8 @Q-OPS-7
  Scenario: a deleted queue cannot be referenced, and a new queue of the same name is another resource
    Given "q" has been deleted
    When I create a consumer "c" of "q" by "w"
    Then the request is refused with 422 "invalid_reference"
    And "q" no longer exists

  @QC-DELIV-6 @QC-DELIV-33 @QC-CRUD-1
  Scenario: a worker that does not provide a queue handler is missing_handler
    Given a fetch-only worker "f"
    When I create a consumer "c" of "q" by "f"
    Then the request is refused with 422 "missing_handler"
    And the listing holds exactly 0 resources named "c"
